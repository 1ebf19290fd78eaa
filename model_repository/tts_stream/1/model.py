"""``tts_stream``: decoupled streaming synthesis, audio chunk by chunk, in order (gRPC).

The text is chunked exactly as ``tts`` chunks it (a short first chunk for fast first
audio); each chunk goes through the ``tts_chunk`` ensemble while earlier ones are being
delivered. Every response carries AUDIO, SAMPLE_RATE, CHUNK_INDEX and IS_LAST; the final
flag is always sent (from a ``finally``), also after an error, and a cancelled request
(the client went away) stops before its next chunk. ``finalize`` waits for streams in
flight. The response sender is never touched after the final flag.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_tts.bls import LongTextSettings, error_response, in_order, read_request

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException(
                "tts_stream needs model_transaction_policy { decoupled: true }"
            )
        self.settings = LongTextSettings.from_model_config(config)
        threads = self.settings.threads
        self.chunks = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="stream-bls")
        self.streams = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="stream")
        self.active = 0
        self.lock = threading.Condition()

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            with self.lock:
                self.active += 1
            self.streams.submit(self._stream, request)

    def _stream(self, request: Any) -> None:
        sender = request.get_response_sender()
        sent_final = False
        try:
            long_text = read_request(request, self.settings)
            count = len(long_text.chunks)
            for index, audio, rate in in_order(
                self.chunks, long_text, self.settings.chunks_in_flight, sender.is_cancelled
            ):
                last = index == count - 1
                response = pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("AUDIO", audio[None, :]),
                        pb_utils.Tensor("SAMPLE_RATE", np.array([[rate]], dtype=np.int32)),
                        pb_utils.Tensor("CHUNK_INDEX", np.array([[index]], dtype=np.int32)),
                        pb_utils.Tensor("IS_LAST", np.array([[last]], dtype=np.bool_)),
                    ]
                )
                # After the final flag the sender is gone: not even is_cancelled() may be
                # called on it (Triton 2.51 crashes).
                sender.send(response, flags=FINAL if last else 0)
                sent_final = last
        except Exception as err:
            if not sent_final:
                sender.send(error_response(err))
        finally:
            if not sent_final:
                sender.send(flags=FINAL)
            with self.lock:
                self.active -= 1
                self.lock.notify_all()

    def finalize(self) -> None:
        with self.lock:
            self.lock.wait_for(lambda: self.active == 0, timeout=60)
        self.streams.shutdown(wait=True)
        self.chunks.shutdown(wait=True, cancel_futures=True)
