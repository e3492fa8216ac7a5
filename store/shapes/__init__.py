"""What the store's things look like to people and programs: the JSON of a memory (``memory``)
and of records (``records``), shared by the API and the CLI, and a record told readably (``diff``).

Pure: imports views, values and search's hit type; no SQL.
"""
