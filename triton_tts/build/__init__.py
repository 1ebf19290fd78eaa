"""The model repository's configs: build options (``BuildOptions``), the rendered
``config.pbtxt`` of every model, and the VAD graph. Read by the export, the repository
builder and the CLI; imports the runtime's limits and the contract below it."""
