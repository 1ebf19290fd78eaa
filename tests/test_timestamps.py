"""Word timestamps through the real server: TIMESTAMPS on ``tts`` and ``tts_stream``,
words as written (a rewritten "$3.50" is one word, "6:05 a.m." two), in order, within the audio, and where
an offline recogniser hears them (pocketsphinx's forced alignment, ``Decoder.seg()``)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.helpers import stream_raw, timed_words, tts_inputs
from triton_tts.ops.server import TritonServer

# Held out: none of these sentences was used while the timing rules were set.
HELD_OUT = [
    "A small boat drifted slowly across the quiet harbour at dawn.",
    "My brother painted the garden fence green last weekend.",
    "Students gathered in the library to study for their final exams.",
    "The baker opened his shop early and sold warm rolls to the workers.",
    "Heavy rain kept the children inside playing board games all afternoon.",
]
MAX_MEDIAN_START_ERROR_S = 0.060  # the bar


def _timed(
    server: TritonServer, text: str, **options: float
) -> tuple[npt.NDArray[np.float32], int, list[tuple[str, float, float]]]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    result = client.infer("tts", tts_inputs(grpcclient, text, TIMESTAMPS=True, **options))
    audio = result.as_numpy("AUDIO").reshape(-1)
    return audio, int(result.as_numpy("SAMPLE_RATE").reshape(-1)[0]), timed_words(result)


def _check_in_order(words: list[tuple[str, float, float]], duration_s: float) -> None:
    for (_, start, end), (_, next_start, _) in zip(words, [*words[1:], ("", duration_s, 0.0)], strict=True):
        assert 0.0 <= start < end <= next_start + 1e-6
    assert words[-1][2] <= duration_s + 1e-6


def test_words_as_written_in_order_within_the_audio(server: TritonServer) -> None:
    text = "I paid $3.50 on 3/4 — call 555-0123, please!"
    audio, rate, words = _timed(server, text)
    assert [w for w, _, _ in words] == ["I", "paid", "$3.50", "on", "3/4", "call", "555-0123,", "please!"]
    _check_in_order(words, audio.size / rate)
    spans = {w: end - start for w, start, end in words}
    assert spans["$3.50"] > 3 * spans["paid"]  # "three dollars and fifty cents"


def test_each_written_word_of_a_rewritten_run_has_its_own_entry(server: TritonServer) -> None:
    # times, dates with abbreviations and units are rewritten across written words
    text = "We left at 6:05 a.m. on Jan. 3rd! It was 3.2 km, i.e. close."
    audio, rate, words = _timed(server, text, NOISE_SCALE=0.0, NOISE_W=0.0)
    assert [w for w, _, _ in words] == text.split()
    _check_in_order(words, audio.size / rate)
    spans = {w: end - start for w, start, end in words}
    assert spans["6:05"] > spans["at"] and spans["3.2"] > spans["It"]  # "six oh five", "three point two"


def test_without_timestamps_no_words_come_back(server: TritonServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    result = client.infer("tts", tts_inputs(grpcclient, "Hello there."))
    assert result.as_numpy("WORDS") is None and result.as_numpy("AUDIO").size > 0


def test_a_long_text_is_timed_across_its_chunks(server: TritonServer) -> None:
    sentence = "The committee met on Tuesday to discuss the new budget for the library. "
    text = sentence * 12  # several chunks
    audio, rate, words = _timed(server, text, NOISE_SCALE=0.0, NOISE_W=0.0)
    assert [w for w, _, _ in words] == text.split()
    _check_in_order(words, audio.size / rate)
    # every sentence takes about as long as the others, wherever its chunk starts
    firsts = [start for w, start, _ in words if w == "The"]
    lengths = np.diff([*firsts, audio.size / rate])
    assert lengths.max() < 1.5 * lengths.min()


def test_a_stream_sends_each_chunks_words_from_the_start_of_the_stream(server: TritonServer) -> None:
    text = " ".join(HELD_OUT)
    chunks, errors = stream_raw(server.grpc_url, text, TIMESTAMPS=True)
    assert not errors and len(chunks) > 1
    words = [w for chunk in chunks for w in chunk["words"]]
    assert [w for w, _, _ in words] == text.split()
    total = sum(chunk["audio"].size for chunk in chunks) / chunks[0]["rate"]
    _check_in_order(words, total)
    sent = 0.0
    for chunk in chunks:  # a chunk's words lie within the audio sent so far
        sent += chunk["audio"].size / chunk["rate"]
        assert all(end <= sent + 1e-6 for _, _, end in chunk["words"])


def test_timestamps_agree_with_a_recognisers_alignment(server: TritonServer) -> None:
    """Median start error against pocketsphinx's forced alignment of the same audio."""
    from triton_tts.quality.intelligibility import transcribe, word_starts

    sample = _timed(server, HELD_OUT[0])[:2]
    before = transcribe(*sample)
    errors = []
    for text in HELD_OUT:
        audio, rate, words = _timed(server, text)
        heard = word_starts(audio, rate, text)
        assert heard is not None, f"the recogniser did not align {text!r}"
        errors += [abs(start - aligned) for (_, start, _), aligned in zip(words, heard, strict=True)]
    assert float(np.median(errors)) <= MAX_MEDIAN_START_ERROR_S
    # Aligning leaves the shared recogniser as it was: it hears the same audio the same way.
    assert transcribe(*sample) == before


def test_the_stream_refuses_timestamps_for_text_it_refuses(server: TritonServer) -> None:
    chunks, errors = stream_raw(server.grpc_url, "", TIMESTAMPS=True)
    assert not chunks and errors and "TEXT" in errors[0]


def test_a_stage_takes_timestamps_only_from_the_server(server: TritonServer) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException, match="internal model"):
        client.infer("preprocess", tts_inputs(grpcclient, "Hello.", TIMESTAMPS=True))
