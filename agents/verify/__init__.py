"""The verifier: is a candidate kernel correct, and how fast is it, judged in a sandbox."""
