"""One decode step's choice of the next audio code, as Hugging Face's ``generate`` makes
it for Coqui's XTTS (``Xtts.inference``): the repetition penalty over every id the
generation has seen, then, when sampling, temperature, top-k and top-p, then a draw.
Temperature 0 is greedy (Coqui's ``do_sample=False``: the penalty, then the argmax).

What "seen" is follows Coqui: its ``generate`` feeds Hugging Face placeholder input ids,
1 for every prompt position and the start code last, so code 1 and the start code are
penalised from the first step, as are the codes generated since.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from triton_tts.xtts.card import Sampling

FloatArray = npt.NDArray[np.float32]
PROMPT_PLACEHOLDER = 1  # the input id Coqui's generate gives every prompt position


def first_seen(codes: int, start: int) -> npt.NDArray[np.bool_]:
    """The ids a generation has seen before its first step: the placeholder and the start code."""
    seen = np.zeros(codes, dtype=bool)
    seen[[PROMPT_PLACEHOLDER, start]] = True
    return seen


def penalise(logits: FloatArray, seen: npt.NDArray[np.bool_], penalty: float) -> FloatArray:
    """Hugging Face's repetition penalty: seen ids' negative logits times ``penalty``,
    positive ones divided by it."""
    if penalty == 1.0:
        return logits
    out = logits.copy()
    hit = out[seen]
    out[seen] = np.where(hit < 0, hit * penalty, hit / penalty)
    return out


def warp(logits: FloatArray, sampling: Sampling) -> FloatArray:
    """Temperature, then top-k, then top-p (nucleus), as Hugging Face's warpers: removed
    ids get -inf; at least one id always stays."""
    out = logits.astype(np.float32)
    if sampling.temperature != 1.0:
        out = out / np.float32(sampling.temperature)
    if sampling.top_k > 0:
        k = min(sampling.top_k, out.shape[-1])
        kth = np.partition(out, -k)[-k]
        out = np.where(out < kth, np.float32(-np.inf), out)
    if sampling.top_p < 1.0:
        order = np.argsort(out, kind="stable")  # ascending, like torch.sort(descending=False)
        ranked = out[order]
        probs = np.exp(ranked - ranked[-1])
        cumulative = np.cumsum(probs / probs.sum())
        drop = cumulative <= (1.0 - sampling.top_p)
        drop[-1] = False
        out = out.copy()
        out[order[drop]] = -np.inf
    return out


def choose(
    logits: FloatArray, seen: npt.NDArray[np.bool_], sampling: Sampling, rng: np.random.Generator
) -> int:
    """The next code from one request's logits; ``seen`` is updated with it."""
    scores = penalise(np.asarray(logits, dtype=np.float32), seen, sampling.repetition_penalty)
    if sampling.temperature == 0.0:
        code = int(np.argmax(scores))
    else:
        with np.errstate(over="ignore", invalid="ignore"):  # overflow: handled below
            warped = warp(scores, sampling).astype(np.float64)
        top = warped.max()
        if np.isinf(top):  # a temperature so small that the scores overflow: its limit, greedy
            code = int(np.argmax(scores))
        else:
            probs = np.exp(warped - top)
            code = int(rng.choice(probs.shape[0], p=probs / probs.sum()))
    seen[code] = True
    return code
