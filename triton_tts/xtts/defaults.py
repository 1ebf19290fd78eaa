"""The XTTS model's defaults, each decided here once: the config's parameters
(triton_tts/model_configs.py renders them), the model that reads them
(triton_tts/xtts/triton_model.py), and the scheduler, runner and clip cache used alone
(tests, benchmarks) all take theirs from this module. Imports nothing."""

SLOTS = 8  # generations decoding together (the cache pool's slots)
CHUNK_CODES = 20  # audio codes a streamed chunk: Coqui's stream_chunk_size
OVERLAP_SAMPLES = 1024  # crossfade at each join, output samples: Coqui's overlap_wav_len
THREADS = 2  # onnxruntime's intra-op threads per session
CONDITIONING_CACHE = 64  # clips' conditionings kept (an LRU by content hash)
WAITING_PER_SLOT = 4  # generations waiting for a slot, per slot, before one is refused
MAX_REFERENCE_S = 60.0  # longer clips are refused (XTTS reads the first 30 s)
MIN_REFERENCE_S = 1.0
