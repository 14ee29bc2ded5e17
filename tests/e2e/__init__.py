"""End-to-end tests: the language server over stdio (pytest-lsp, raw frames), Neovim."""
