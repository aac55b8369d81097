"""The IPython surface: one thin module per magic (parse the line, call the engine, display the result)."""
