"""The gateway's web page in a real browser: Debian's headless Chromium driven by Playwright,
in front of `triton-tts gateway` and the session's tritonserver. A person's steps: type,
Speak, hear it as it streams, read time to first audio and real-time factor, download the
WAV; an error shown for a bad request; Stop in the middle of a long text.

Chromium here has no sound card; it then plays into a fake audio output whose clock runs in
real time, so AudioBufferSourceNodes end and AudioContext.currentTime advances as with
speakers (no extra flags needed)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from playwright.sync_api import Browser, Page, expect, sync_playwright

from testkit.sample_texts import PARAGRAPH
from tests.helpers import running_gateway, stream_paragraph_chunks
from triton_tts.contract.validation import MAX_SPEED, MIN_SPEED
from triton_tts.contract.voice import Voice
from triton_tts.gateway.command import API_KEY_ENV
from triton_tts.ops.server import TritonServer

CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="no chromium binary on PATH (Debian: apt-get install chromium)"
    ),
]

# Three sentences: a stream sends the first alone, so more than one chunk arrives.
TEXT = "Welcome to the city library. We open at nine and close at eight. Have a nice day!"
# Deadlines for hangs, not claims about speed.
SYNTHESIS_TIMEOUT_MS = 120_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM is not None
    with sync_playwright() as playwright:
        # Playwright starts Chromium with --no-sandbox unless asked otherwise, which running
        # as root (CI containers) needs. Sound may start without a click: the test clicks
        # anyway, as a person does, but nothing then depends on how a click is judged.
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--autoplay-policy=no-user-gesture-required"]
        )
        yield launched
        launched.close()


@pytest.fixture()
def page(browser: Browser, gateway: str) -> Iterator[Page]:
    context = browser.new_context(accept_downloads=True)
    opened = context.new_page()
    script_errors: list[str] = []
    opened.on("pageerror", lambda error: script_errors.append(str(error)))
    opened.goto(gateway)
    expect(opened.locator("#voice")).not_to_have_value("")  # the voice list arrived
    yield opened
    context.close()
    assert not script_errors, script_errors


def stats(page: Page) -> dict[str, Any]:
    # Spread, so the live audioContextTime getter is read into a plain object.
    result: dict[str, Any] = page.evaluate("() => ({...window.ttsStats})")
    return result


def speak(page: Page, text: str) -> None:
    page.fill("#text", text)
    page.click("#speak")


def wait_for_state(page: Page, *states: str, timeout_ms: int = SYNTHESIS_TIMEOUT_MS) -> dict[str, Any]:
    page.wait_for_function(
        "states => states.includes(window.ttsStats.state)", arg=list(states), timeout=timeout_ms
    )
    return stats(page)


def test_speak_streams_plays_measures_and_downloads(page: Page, voice: Voice, tmp_path: Path) -> None:
    expect(page.locator("#voice")).to_have_value("joe")
    expect(page.locator("#speed")).to_have_value("1")
    for control in ("#speed", "#speed-range"):  # the server's bounds, as its voices listing says
        expect(page.locator(control)).to_have_attribute("min", f"{MIN_SPEED:g}")
        expect(page.locator(control)).to_have_attribute("max", f"{MAX_SPEED:g}")
    clock_before = stats(page)["audioContextTime"]
    speak(page, TEXT)
    done = wait_for_state(page, "done", "error", "cancelled")
    assert done["state"] == "done", done

    assert done["sampleRate"] == voice.sample_rate
    assert done["chunks"] >= 2, done
    seconds = done["samples"] / done["sampleRate"]
    assert 0.03 * len(TEXT) < seconds < 0.2 * len(TEXT), (seconds, len(TEXT))
    # What the page received is what the server says it sent.
    server = done["server"]
    assert (server["chunks"], server["samples"]) == (done["chunks"], done["samples"]), done
    assert done["scheduledSeconds"] == pytest.approx(seconds)

    assert done["ttfaMs"] > 0 and done["rtf"] > 0 and done["serverRtf"] > 0, done
    ttfa_shown = page.locator("#ttfa").inner_text()
    assert ttfa_shown.endswith(" ms") and abs(int(ttfa_shown[:-3]) - done["ttfaMs"]) <= 0.5, ttfa_shown
    rtf_shown = page.locator("#rtf").inner_text()
    assert abs(float(rtf_shown.split()[0]) - done["rtf"]) <= 0.0005 and "server" in rtf_shown, rtf_shown
    expect(page.locator("#chunks")).to_have_text(str(done["chunks"]))
    expect(page.locator("#status")).to_contain_text("Done")

    # Every chunk was played to its end, on a clock that ran at least as long as the audio.
    page.wait_for_function(
        "() => window.ttsStats.playedChunks === window.ttsStats.chunks",
        timeout=round(seconds * 1000) + 30_000,
    )
    assert stats(page)["audioContextTime"] - clock_before >= seconds

    with page.expect_download() as download_info:
        page.click("#download")
    saved = tmp_path / "speech.wav"
    download_info.value.save_as(saved)
    audio, rate = sf.read(saved, dtype="int16")
    info = sf.info(saved)
    assert (info.format, info.subtype, info.channels) == ("WAV", "PCM_16", 1)
    assert rate == voice.sample_rate and audio.shape == (done["samples"],)
    assert np.abs(audio).max() > 1000  # speech, not silence


def test_errors_are_shown_and_the_page_recovers(page: Page) -> None:
    speak(page, "")
    failed = wait_for_state(page, "done", "error")
    assert failed["state"] == "error" and failed["error"], failed
    status = page.locator("#status")
    expect(status).to_be_visible()
    expect(status).to_contain_text(failed["error"])
    expect(page.locator("#download")).to_be_disabled()

    speak(page, "This one is fine.")
    done = wait_for_state(page, "done", "error")
    assert done["state"] == "done" and done["chunks"] >= 1 and done["error"] is None, done
    expect(page.locator("#download")).to_be_enabled()


def test_stop_cancels_a_long_text(page: Page) -> None:
    copies = 3  # about two minutes of speech
    speak(page, " ".join([PARAGRAPH] * copies))
    page.wait_for_function("() => window.ttsStats.chunks >= 1", timeout=SYNTHESIS_TIMEOUT_MS)
    page.click("#stop")
    stopped = wait_for_state(page, "cancelled", "done", "error")
    assert stopped["state"] == "cancelled", stopped
    assert 1 <= stopped["chunks"] < stream_paragraph_chunks(copies), stopped
    expect(page.locator("#stop")).to_be_disabled()  # nothing left playing
    expect(page.locator("#download")).to_be_disabled()

    speak(page, "And now something short.")
    assert wait_for_state(page, "done", "error")["state"] == "done"


def test_the_api_key_field(browser: Browser, server: TritonServer) -> None:
    """With keys required, the page says why nothing works until the key is typed; then the
    voices load (Authorization header) and it speaks (?api_key= on the socket)."""
    key = "page-test-key"
    with running_gateway(server.grpc_url, env={API_KEY_ENV: key}) as url:
        context = browser.new_context()
        try:
            page = context.new_page()
            page.goto(url)
            expect(page.locator("#voice-info")).to_contain_text("API key")
            speak(page, "Hello.")
            refused = wait_for_state(page, "done", "error")
            assert refused["state"] == "error" and "API key" in refused["error"], refused
            expect(page.locator("#status")).to_contain_text("API key")

            page.fill("#api-key", key)
            page.press("#api-key", "Tab")  # a change event, as when a person moves on
            expect(page.locator("#voice")).to_have_value("joe")
            speak(page, "Hello.")
            assert wait_for_state(page, "done", "error")["state"] == "done"
        finally:
            context.close()


def test_ssml_is_spoken_and_each_word_lit_as_it_is_said(page: Page) -> None:
    """SSML typed into the page is read (its break is silence, its tags unsaid), and the
    words arrive with their times and light up one by one as the audio reaches them."""
    speak(page, '<speak>Hello there.<break time="1s"/>Good <sub alias="morning">AM</sub>!</speak>')
    done = wait_for_state(page, "done", "error", "cancelled")
    assert done["state"] == "done", done
    expect(page.locator("#words")).to_have_text("Hello there. Good AM!")
    assert done["words"] == 4, done
    seconds = done["samples"] / done["sampleRate"]
    assert seconds > 1.8  # the break's second and the words
    page.wait_for_function(
        "() => window.ttsStats.playedChunks === window.ttsStats.chunks",
        timeout=round(seconds * 1000) + 30_000,
    )
    page.wait_for_function("() => window.ttsStats.wordsShown === 4", timeout=5_000)
    assert page.locator("#words span.said").count() == 4
