"""`secretary mcp`: the memory tools for MCP clients (agents), over stdio or streamable HTTP.

``tools`` holds the tools (each one call of the Python client); ``app`` serves them in one
process with the store. docs/mcp.md tells how to add the server to an agent.
"""
