"""The contract every layer reads: the voice folder (``voice``), request validation and its
errors, the config parameters shared by build and runtime, style tables and mixes, and where
files live (``paths``). Imports nothing of triton_tts but the client."""
