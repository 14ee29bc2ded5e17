// esbuild: the extension into dist/extension.js (CommonJS, `vscode` external), or the unit
// tests into out/test/ for `node --test`.
import { build, context } from "esbuild";
import { readdirSync } from "node:fs";

const args = new Set(process.argv.slice(2));
const production = args.has("--production");

const extension = {
  entryPoints: ["src/extension.ts"],
  bundle: true,
  outfile: "dist/extension.js",
  external: ["vscode"],
  format: "cjs",
  platform: "node",
  target: "node20",
  sourcemap: !production,
  minify: production,
  logLevel: "info",
};

const tests = {
  entryPoints: readdirSync("test")
    .filter((f) => f.endsWith(".test.ts"))
    .map((f) => `test/${f}`),
  bundle: true,
  outdir: "out/test",
  format: "cjs",
  platform: "node",
  target: "node20",
  logLevel: "warning",
};

const options = args.has("--tests") ? tests : extension;
if (args.has("--watch")) {
  await (await context(options)).watch();
} else {
  await build(options);
}
