"""What the store's things look like to people and programs: the JSON of a memory (``memory``)
and of records (``records``), shared by the API and the CLI, a record told readably (``diff``),
and a dream request with its runs (``dreams``).

Pure: imports views, values, search's hit type and the dream requests' view; no SQL.
"""
