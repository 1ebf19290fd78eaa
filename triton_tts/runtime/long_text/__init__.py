"""Long text through the ``tts_chunk`` ensemble with Triton's business logic scripting, by role.

Shared by the ``tts`` (whole audio) and ``tts_stream`` (decoupled, chunk by chunk)
Python models: read and check the request, choose the voice and normalise the text once
(:mod:`.request`), split it into chunks (:mod:`triton_tts.runtime.chunking`), send each
chunk through the voice's ``tts_chunk`` ensemble (:mod:`.send`), the one short requests
use, so chunks of long texts batch with everyone else's traffic in the acoustic and
vocoder models, and deliver them in reading order (:mod:`.deliver`); how a request ends
otherwise is :mod:`.ending`. Each chunk goes with NORMALIZE false (its text is normalised
already), the client's SPEED, SPEAKER_ID, NOISE_* and VOICE_MIX as sent, no VOICE (the
ensemble is the voice), and the request id ``<id>/<chunk index>``. Chunks with nothing to
pronounce (:func:`triton_tts.text.speaks.pronounceable`: a "* * *" line) are never sent;
one that preprocess still finds nothing to say in (only letters the voice has no symbols
for) fails the request with preprocess's refusal, like any other refused chunk. Only
importable inside Triton's Python backend (it needs ``triton_python_backend_utils``).

Work for a request that no one waits for stops: before each chunk starts, the request's
:class:`triton_tts.runtime.cancellation.Cancellation` is asked, and a cancelled request starts no more chunks
(those in flight, at most ``chunks_in_flight``, finish and are dropped).
"""
