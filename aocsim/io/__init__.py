"""Reading and writing aocsim files (model directories; later result datasets)."""
