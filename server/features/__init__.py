"""The server's LSP handlers, one module per part of the protocol.

Each module's `register(ls)` defines its handlers on a server instance (pygls 2 registers
handlers on an instance, not on a class); `server.app.create_server` calls them all. The
handlers' helpers are plain functions whose first parameter is the server, `ls`. A feature
imports neither `server.app` nor another feature: what several features share (starting and
following jobs, what a finished job leaves behind, the rewrite decisions, guards, positions)
lives in `server/` beside the app.
"""
