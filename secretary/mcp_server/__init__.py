"""`secretary mcp`: the memory tools for MCP clients (agents), over stdio or streamable HTTP.

``tools`` holds the tools (each a call of the Python client), ``shapes`` what they take and
answer beyond the client's values; ``app`` serves them in one process with the store.
docs/mcp.md tells how to add the server to an agent.
"""
