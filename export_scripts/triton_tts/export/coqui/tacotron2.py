"""Coqui Tacotron2 (and Tacotron2-DDC) -> three step-wise ONNX files + the vocoder.

Tacotron2's decoder is autoregressive with a data-dependent length (a stop token), which a
single traced graph cannot express, so the acoustic stage is split where the loop is:

- ``tacotron2_encoder.onnx``: PHONEME_IDS[B,T], PHONEME_LENGTH[B] (+ SPEAKER_ID[B]) ->
  ENCODER_OUTPUTS[B,T,D], PROCESSED_INPUTS[B,T,A] (the attention's keys, computed once),
  MASK[B,T] (bool, True on real tokens).
- ``tacotron2_decoder_step.onnx``: MEMORY[B,C] (the previous frame; zeros at the start),
  the recurrent and attention states, ENCODER_OUTPUTS, PROCESSED_INPUTS, MASK -> FRAMES[B,r,C]
  (r = the reduction factor), STOP[B] (stop probability) and ``NEW_<state>`` for each
  state. State inputs are every input that is not one of the four above; they start at
  zeros and have shape [B, n] or [B, T] (see :mod:`triton_tts.runtime.tacotron`, which runs the loop).
- ``tacotron2_postnet.onnx``: MEL[B,C,F], FRAME_COUNT[B] -> POSTNET_MEL[B,C,F] (postnet
  output plus its input, as Coqui adds the residual; masked past each item's frames).

Each wrapper re-states Coqui's ``Tacotron2.inference`` path with per-item lengths. Coqui's
inference assumes batch 1 (no input mask, an LSTM over the whole padded row, a postnet that
sees only real frames); here padded positions are zeroed before every convolution (what a
convolution's own zero padding does at batch 1), the encoder's backward LSTM starts at each
item's last real token, and attention energies of padded encoder positions are masked
before normalisation, so every item of a padded batch gets exactly its batch-1 output.

What Coqui's inference runs: the embedding, the encoder (``Encoder.inference``), the
speaker embedding concatenated to the encoder outputs for multi-speaker models, the main
decoder (``Decoder.inference``, r = ``decoder.r``) and the postnet. DDC's coarse decoder
and the backward decoder only run in training, so they are not exported.

Supported: the "original" (location-sensitive or plain additive) attention with softmax or
sigmoid normalisation, the "original" and "bn" prenets, speaker-embedding speakers.
Refused with a clear error: Graves and dynamic-convolution attention, forward attention,
attention windowing (Coqui's window tracks item 0 of the batch only), GST, Capacitron and
d-vector speakers.

Prenet dropout at inference (``prenet_dropout_at_inference``, off in Coqui's defaults)
makes Coqui's output random; when a model has it on, the exported step keeps it (a random
mask drawn inside the graph, p=0.5, as ``F.dropout``), so such a model is as random as
Coqui's and only the dropout-off case is compared element-wise.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from triton_tts.contract.voice import VOCODER_FILE, Voice
from triton_tts.export.coqui.loading import Loaded
from triton_tts.export.coqui.mel_vocoder import mel_vocoder
from triton_tts.export.coqui.onnx_export import VOCODER_AXES, export_module
from triton_tts.runtime.tacotron import DECODER_STEP_FILE, ENCODER_FILE, POSTNET_FILE, STATIC_INPUTS

# Decoder state names, in the step's input order (outputs are "NEW_" + name).
QUERY_STATES = ("QUERY_HIDDEN", "QUERY_CELL")
DECODER_STATES = ("DECODER_HIDDEN", "DECODER_CELL")
ATTENTION_STATES = ("ATTENTION_WEIGHTS", "ATTENTION_CUMULATIVE")


def check_supported(tts: Any) -> None:
    """Raise ValueError for Tacotron2 options the step-wise export does not re-state."""
    config = tts.config
    problems = []
    if config.attention_type != "original":
        problems.append(f"attention_type={config.attention_type!r} (only 'original')")
    if config.use_forward_attn:
        problems.append("use_forward_attn")
    if config.attention_win or config.windowing:
        problems.append("attention_win / windowing (Coqui's window follows batch item 0 only)")
    if config.attention_norm not in ("softmax", "sigmoid"):
        problems.append(f"attention_norm={config.attention_norm!r}")
    if config.use_gst:
        problems.append("use_gst (global style tokens)")
    if config.use_capacitron_vae:
        problems.append("use_capacitron_vae")
    if config.use_d_vector_file:
        problems.append("use_d_vector_file (d-vector speakers)")
    if config.prenet_type not in ("original", "bn"):
        problems.append(f"prenet_type={config.prenet_type!r}")
    if problems:
        raise ValueError("unsupported Tacotron2 options for the step-wise export: " + "; ".join(problems))


def _has_speakers(tts: Any) -> bool:
    return bool(tts.num_speakers > 1 and getattr(tts, "speaker_embedding", None) is not None)


def _masked(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, C, T] x [B, T] bool -> x with padded positions zeroed."""
    return x * mask.unsqueeze(1).to(x.dtype)


def _conv_block(block: Any, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Coqui's ConvBNBlock (eval: dropout is identity) with its input zeroed past each
    item's length, which is what the convolution sees at batch 1 (zero padding)."""
    out = block.batch_normalization(block.convolution1d(_masked(x, mask)))
    return block.activation(out)  # type: ignore[no-any-return]


class Tacotron2Encoder(nn.Module):
    """Embedding, conv stack and bidirectional LSTM with per-item lengths, speaker
    concatenation, the attention's key projection, and the token mask."""

    def __init__(self, tts: Any) -> None:
        super().__init__()
        self.tts = tts
        lstm: nn.LSTM = tts.encoder.lstm
        hidden = lstm.hidden_size
        # Two one-direction LSTMs sharing the bidirectional LSTM's weights: the backward one
        # runs on each item's tokens reversed in place, so it starts at the item's own last
        # token (batch 1 does) instead of at the padding.
        self.forward_lstm = nn.LSTM(lstm.input_size, hidden, batch_first=True)
        self.backward_lstm = nn.LSTM(lstm.input_size, hidden, batch_first=True)
        with torch.no_grad():
            for name in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
                getattr(self.forward_lstm, name).copy_(getattr(lstm, name))
                getattr(self.backward_lstm, name).copy_(getattr(lstm, name + "_reverse"))

    def forward(
        self, ids: torch.Tensor, lengths: torch.Tensor, speaker_id: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        tts = self.tts
        steps = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        mask = steps < lengths.unsqueeze(1)
        x = tts.embedding(ids).transpose(1, 2)
        for block in tts.encoder.convolutions:
            x = _conv_block(block, x, mask)
        x = _masked(x, mask).transpose(1, 2)  # [B, T, C]
        forward_out, _ = self.forward_lstm(x)
        # per item: position t <-> length-1-t for real tokens, padding stays where it is
        flip = torch.where(mask, lengths.unsqueeze(1) - 1 - steps, steps)
        index = flip.unsqueeze(-1).expand(-1, -1, x.shape[-1])
        backward_out, _ = self.backward_lstm(torch.gather(x, 1, index))
        out_index = flip.unsqueeze(-1).expand(-1, -1, backward_out.shape[-1])
        backward_out = torch.gather(backward_out, 1, out_index)
        outputs = torch.cat([forward_out, backward_out], dim=-1)
        if speaker_id is not None:
            speaker = tts.speaker_embedding(speaker_id).unsqueeze(1)
            outputs = torch.cat([outputs, speaker.expand(-1, outputs.shape[1], -1)], dim=-1)
        outputs = outputs * mask.unsqueeze(-1).to(outputs.dtype)
        processed = tts.decoder.attention.preprocess_inputs(outputs)
        return outputs, processed, mask


class Tacotron2DecoderStep(nn.Module):
    """One step of Coqui's ``Decoder.inference`` loop (``Decoder.decode`` plus the prenet on
    the previous frame), with the recurrent and attention states passed in and out."""

    def __init__(self, tts: Any) -> None:
        super().__init__()
        self.decoder = tts.decoder
        self.location = bool(self.decoder.attention.location_attention)
        self.prenet_dropout = bool(
            self.decoder.prenet.prenet_dropout and self.decoder.prenet.dropout_at_inference
        )

    def prenet(self, x: torch.Tensor) -> torch.Tensor:
        for linear in self.decoder.prenet.linear_layers:
            x = functional.relu(linear(x))
            if self.prenet_dropout:  # F.dropout(p=0.5, training=True), drawn in the graph
                x = x * (torch.rand_like(x) >= 0.5).to(x.dtype) * 2.0
        return x

    def forward(
        self,
        memory: torch.Tensor,
        query_hidden: torch.Tensor,
        query_cell: torch.Tensor,
        decoder_hidden: torch.Tensor,
        decoder_cell: torch.Tensor,
        context: torch.Tensor,
        attention_weights: torch.Tensor,
        attention_cumulative: torch.Tensor,
        inputs: torch.Tensor,
        processed_inputs: torch.Tensor,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        decoder = self.decoder
        attention = decoder.attention
        query_hidden, query_cell = decoder.attention_rnn(
            torch.cat([self.prenet(memory), context], -1), (query_hidden, query_cell)
        )
        processed_query = attention.query_layer(query_hidden.unsqueeze(1))
        if self.location:
            stacked = torch.stack([attention_weights, attention_cumulative], dim=1)
            energies = attention.v(
                torch.tanh(processed_query + attention.location_layer(stacked) + processed_inputs)
            )
        else:
            energies = attention.v(torch.tanh(processed_query + processed_inputs))
        energies = energies.squeeze(-1).masked_fill(~mask, float("-inf"))
        if attention.norm == "softmax":
            alignment = torch.softmax(energies, dim=-1)
        else:
            scores = torch.sigmoid(energies)
            alignment = scores / scores.sum(dim=1, keepdim=True)
        if self.location:
            attention_cumulative = attention_cumulative + alignment
        context = torch.bmm(alignment.unsqueeze(1), inputs).squeeze(1)
        decoder_hidden, decoder_cell = decoder.decoder_rnn(
            torch.cat([query_hidden, context], -1), (decoder_hidden, decoder_cell)
        )
        output = decoder.linear_projection(torch.cat([decoder_hidden, context], dim=1))
        stop = torch.sigmoid(decoder.stopnet(torch.cat([decoder_hidden, output], dim=1))).squeeze(1)
        frames = output[:, : decoder.r * decoder.frame_channels].reshape(
            -1, decoder.r, decoder.frame_channels
        )
        return (
            frames,
            stop,
            query_hidden,
            query_cell,
            decoder_hidden,
            decoder_cell,
            context,
            alignment,
            attention_cumulative,
        )


class Tacotron2Postnet(nn.Module):
    """Postnet plus residual (Coqui's ``decoder_outputs + postnet(decoder_outputs)``), each
    conv's input zeroed past the item's frames; the result is zero there too."""

    def __init__(self, tts: Any) -> None:
        super().__init__()
        self.postnet = tts.postnet

    def forward(self, mel: torch.Tensor, frame_count: torch.Tensor) -> torch.Tensor:
        steps = torch.arange(mel.shape[-1], device=mel.device).unsqueeze(0)
        mask = steps < frame_count.unsqueeze(1)
        x = mel
        for block in self.postnet.convolutions:
            x = _conv_block(block, x, mask)
        return _masked(mel + x, mask)


def step_state_names() -> list[str]:
    return [*QUERY_STATES, *DECODER_STATES, "CONTEXT", *ATTENTION_STATES]


def export_stages(tts: Any, out: Path, batch: int = 2, length: int = 23) -> None:
    """Write the encoder, decoder-step and postnet ONNX files into ``out``."""
    check_supported(tts)
    tts.eval()
    speakers = _has_speakers(tts)
    encoder = Tacotron2Encoder(tts)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, int(tts.embedding.num_embeddings), (batch, length), generator=generator)
    lengths = torch.tensor([length - 5 * i for i in range(batch)], dtype=torch.long)
    encoder_args: tuple[torch.Tensor, ...] = (ids, lengths)
    encoder_inputs = ["PHONEME_IDS", "PHONEME_LENGTH"]
    if speakers:
        encoder_args += (torch.zeros(batch, dtype=torch.long),)
        encoder_inputs.append("SPEAKER_ID")
    tokens = {0: "batch", 1: "phonemes"}
    export_module(
        encoder,
        encoder_args,
        out / ENCODER_FILE,
        encoder_inputs,
        list(STATIC_INPUTS),
        {
            "PHONEME_IDS": tokens,
            "PHONEME_LENGTH": {0: "batch"},
            "SPEAKER_ID": {0: "batch"},
            **{name: tokens for name in STATIC_INPUTS},
        },
    )
    with torch.no_grad():
        inputs, processed, mask = encoder(*encoder_args)

    decoder = tts.decoder
    states = step_state_names()
    widths = {
        "QUERY_HIDDEN": decoder.query_dim,
        "QUERY_CELL": decoder.query_dim,
        "DECODER_HIDDEN": decoder.decoder_rnn_dim,
        "DECODER_CELL": decoder.decoder_rnn_dim,
        "CONTEXT": inputs.shape[-1],
    }
    state_args = [torch.rand(batch, widths.get(name, length)) * 0.1 for name in states]
    step_args = (torch.rand(batch, decoder.frame_channels), *state_args, inputs, processed, mask)
    step_inputs = ["MEMORY", *states, *STATIC_INPUTS]
    step_outputs = ["FRAMES", "STOP", *("NEW_" + name for name in states)]
    axes = {name: {0: "batch"} for name in ["MEMORY", *step_outputs, *states]}
    for name in ("ATTENTION_WEIGHTS", "ATTENTION_CUMULATIVE"):
        axes[name] = axes["NEW_" + name] = tokens
    axes.update({name: tokens for name in STATIC_INPUTS})
    export_module(
        Tacotron2DecoderStep(tts), step_args, out / DECODER_STEP_FILE, step_inputs, step_outputs, axes
    )

    mel_axes = {0: "batch", 2: "frames"}
    mel = torch.randn(batch, decoder.frame_channels, 31)
    frame_count = torch.tensor([31 - 11 * (i % 2) for i in range(batch)])
    export_module(
        Tacotron2Postnet(tts),
        (mel, frame_count),
        out / POSTNET_FILE,
        ["MEL", "FRAME_COUNT"],
        ["POSTNET_MEL"],
        {"MEL": mel_axes, "FRAME_COUNT": {0: "batch"}, "POSTNET_MEL": mel_axes},
    )


def export(loaded: Loaded, out: Path, voice: Voice) -> Voice:
    """The three acoustic files and ``vocoder.onnx``; returns ``voice`` set up for them."""
    tts = loaded.tts
    export_stages(tts, out)
    vocoder, edge_frames = mel_vocoder(loaded)
    n_mels = int(tts.decoder.frame_channels)
    example = torch.randn(2, n_mels, 40)
    example[1, :, 30:] = 0  # a shorter second item: zero frames past its end, as the runner pads
    export_module(vocoder, (example,), out / VOCODER_FILE, ["LATENT"], ["WAVEFORM"], VOCODER_AXES)
    return replace(
        voice,
        acoustic_kind="tacotron2",
        max_decoder_steps=int(tts.config.max_decoder_steps),
        latent_channels=n_mels,
        mel_edge_frames=int(edge_frames),
        noise_scale=0.0,
        noise_w=0.0,
    )
