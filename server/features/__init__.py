"""The server's LSP handlers, one module per part of the protocol.

Each module's `register(ls)` defines its handlers on a server instance (pygls 2 registers
handlers on an instance, not on a class); `server.app.create_server` calls them all. The
handlers' helpers are plain functions whose first parameter is the server, `ls`.
"""
