"""The XTTS model's defaults, each decided here once: the config's parameters
(triton_tts/build/model_configs.py renders them), the model that reads them
(model_repository/xtts/1/model.py), and the scheduler, runner and clip cache used alone
(tests, benchmarks) all take theirs from this module. Imports nothing."""

SLOTS = 8  # generations decoding together (the cache pool's slots)
CHUNK_CODES = 20  # audio codes a streamed chunk: Coqui's stream_chunk_size
OVERLAP_SAMPLES = 1024  # crossfade at each join, output samples: Coqui's overlap_wav_len
THREADS = 2  # onnxruntime's intra-op threads per session
CONDITIONING_CACHE = 64  # clips' conditionings kept (an LRU by content hash)
WAITING_PER_SLOT = 4  # generations waiting for a slot, per slot, before one is refused
MAX_REFERENCE_S = 60.0  # longer clips are refused (XTTS reads the first 30 s)
MIN_REFERENCE_S = 1.0
# Admission (triton_tts/runtime/admission.py, through tts and tts_stream): an XTTS voice's text is
# its predicted audio over the voice's capacity, in the ledger the chunk voices share.
# Seconds of audio per character at SPEED 1: read speech runs about 150 words a minute,
# some 14 characters a second in English (Coqui trains XTTS v2 on read speech); XTTS's
# segments are cut by characters too (Coqui's char_limits).
SECONDS_PER_CHAR = 0.07
# A Chinese, Japanese or Korean character says about three Latin ones' worth: Coqui's
# char_limits give a segment 250 characters in English, 82 in Chinese, 71 in Japanese and
# 95 in Korean, each sized to the same longest audio.
CJK_CHAR_WEIGHT = 3
# Audio seconds a second the model is assumed to make before it has measured itself:
# full-size XTTS v2 on 2 CPU cores made 0.165-0.245x real time (docs/performance.md,
# "XTTS v2 on CPU"), far below a chunk voice's ~26; the model corrects it from what it
# makes (triton_tts/xtts/capacity.py), upward at once on a faster machine.
CAPACITY = 0.2
CAPACITY_WINDOW_S = 5.0  # the model's throughput is judged over windows this long
