"""The held-out sentences every FP16 and INT8 export is gated on.

The precision gate (:mod:`triton_tts.export.precision_gate`) synthesises these through the
FP32 voice and through the candidate, noise off, and compares the two: waveform SNR, and
the word error rate of an offline recogniser (:mod:`triton_tts.quality.intelligibility`). The set
is large enough that one misheard word moves the WER by under 0.3 percentage points
(30 sentences, 345 words), and it includes numbers, times, money and a year, which reach
the voice as words through the server's normaliser. None of these sentences is a
calibration text of the INT8 export (``triton_tts.export.quantize.CALIBRATION_TEXTS``),
so the gate measures what calibration did not see.

Changing a sentence changes every figure measured on the set (docs/performance.md).
"""

from __future__ import annotations

from triton_tts.text.normalize import normalize_english

GATE_TEXTS: tuple[str, ...] = (
    "Please call me back when you get home from work tonight.",
    "I would like to order a large pizza with extra cheese.",
    "She read the whole book in one quiet afternoon by the window.",
    "My favorite color is green, but my sister prefers blue.",
    "The weather today is sunny with a light breeze from the west.",
    "We will send the signed documents to you by email tomorrow.",
    "Your appointment has been moved to Monday at 10:30 in the morning.",
    "The train to the airport leaves from platform 4 every 15 minutes.",
    "Our store is open from 9 until 6 on weekdays.",
    "The package weighs 12 kilograms and should arrive within 3 days.",
    "Flight 237 to Chicago is now boarding at gate 18.",
    "The total comes to $45.50, including tax and delivery.",
    "He has lived in the same small house since 1987.",
    "About 40 percent of the students walk to school every day.",
    "The meeting will start in five minutes, so please find a seat.",
    "Can you tell me where the nearest post office is?",
    "The children played in the garden until it started to rain.",
    "Remember to turn off the lights before you leave the office.",
    "The doctor said that I should drink more water and sleep well.",
    "They bought fresh bread, cheese and apples at the market.",
    "Please enter your account number followed by the pound key.",
    "The museum has more than 2,500 paintings from around the world.",
    "A cold wind blew across the lake as the sun went down.",
    "If you need more help, press 0 to speak to an agent.",
    "The river rose quickly after three days of heavy rain.",
    "I am sorry, but that seat has already been taken.",
    "The new bridge will open to traffic at the end of March.",
    "The recipe calls for 2 cups of flour and 1 cup of sugar.",
    "We are expecting about 300 guests at the wedding next summer.",
    "Thank you for your patience while we check your order.",
)


def spoken(texts: tuple[str, ...] | list[str] = GATE_TEXTS) -> list[str]:
    """The texts as the voice says them (numbers as words): the recogniser's references."""
    return [normalize_english(text) for text in texts]
