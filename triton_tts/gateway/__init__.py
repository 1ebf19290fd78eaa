"""OpenAI-compatible HTTP and WebSocket gateway in front of triton-tts."""
