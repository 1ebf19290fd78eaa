"""``triton-tts serve``: build the repository, start tritonserver under supervision (the
watchdog, the start-up gate and the capacity measurement, up to three starts when it
crashes before it is ready), the gateway beside it when asked, and drain before stopping."""

from __future__ import annotations

import argparse
import itertools
import logging
import os
import secrets
import signal
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from triton_tts.client.tts_client import env_api_key
from triton_tts.gateway import command as gateway_command
from triton_tts.ops.lifecycle import drain, supervised
from triton_tts.ops.server import TritonCrashed, TritonServer

if TYPE_CHECKING:
    pass

from triton_tts.cli.options import ADMIN_KEY_ENV, build_options, voice_dirs

log = logging.getLogger("triton_tts")


def stop_on_signal(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_serve(args: argparse.Namespace) -> int:
    from triton_tts.ops.repository import build_repository

    # Ctrl-C, `kill` and Kubernetes all stop the server the same way: Triton drains
    # in-flight requests, then exits. Installed explicitly, since a shell may start us
    # with SIGINT ignored (background jobs), and SIGTERM would otherwise orphan Triton.
    signal.signal(signal.SIGINT, stop_on_signal)
    signal.signal(signal.SIGTERM, stop_on_signal)
    if not args.no_build:
        build_repository(voice_dirs(args), Path(args.model_repository), build_options(args))
    server = TritonServer(
        args.model_repository,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        model_config_name=args.model_config_name,
        log_verbose=args.log_verbose,
        extra_args=list(args.triton_arg or []),
        # The admin APIs' key (the watchdog's model control among them); clients never see
        # it, and no log line shows it. The API key guards Triton's callers' APIs too.
        admin_key=os.environ.get(ADMIN_KEY_ENV) or secrets.token_urlsafe(24),
        api_key=env_api_key(),  # the first of TRITON_TTS_API_KEY's keys
        host=args.host,
    )
    # From here on, what serve and its children write (the run folder's files, Triton's
    # log, the gateway's) is its user's alone; the repository above keeps the caller's umask.
    os.umask(0o077)
    server.start()
    with ExitStack() as supervision:
        return run_server(args, server, supervision)


def start_gateway(args: argparse.Namespace, server: TritonServer, supervision: ExitStack) -> None:
    """The gateway as a child process; at a stop it is told first (SIGTERM: it refuses new
    requests and finishes those in flight while Triton drains), and waited for last."""
    extra = ["--host", args.host, "--riva-port", str(args.riva_port)]
    gateway = gateway_command.start_child(args.gateway_port, server.grpc_url, extra)

    def stop() -> None:
        if gateway.poll() is None:
            gateway.terminate()
        try:
            gateway.wait(timeout=args.drain_timeout + 10)
        except subprocess.TimeoutExpired:
            gateway.kill()

    supervision.callback(stop)
    gateway_command.wait_live(args.gateway_port, gateway, host=server.local_host)


START_ATTEMPTS = 3  # of tritonserver, when it crashes before it is ready


def start_up(args: argparse.Namespace, server: TritonServer, supervision: ExitStack) -> None:
    """Wait for the started server, under the watchdog from tritonserver's start on (a stub
    killed during warm-up or the capacity measurement heals as one killed under load does);
    a tritonserver that crashes meanwhile (2.51 does, when a stub dies in its warm-up) is
    started afresh, up to START_ATTEMPTS times."""
    for attempt in itertools.count(1):
        watched = ExitStack()
        if not args.no_watchdog:
            watched.enter_context(supervised(server, args.health_port or None))
        try:
            server.wait_ready()
        except TritonCrashed as err:
            watched.close()
            server.stop()
            if attempt >= START_ATTEMPTS:
                raise
            log.warning("%s; starting it again (%d of %d)", err, attempt + 1, START_ATTEMPTS)
            server.start()
            continue
        except BaseException:
            watched.close()
            raise
        supervision.enter_context(watched)
        return


def run_server(args: argparse.Namespace, server: TritonServer, supervision: ExitStack) -> int:
    try:
        start_up(args, server, supervision)
        if args.gateway_port:
            start_gateway(args, server, supervision)
        print(
            "\ntriton-tts is ready (warm-up done).\n"
            f"  HTTP    localhost:{args.http_port}   gRPC localhost:{args.grpc_port}"
            f"   metrics http://localhost:{args.metrics_port}/metrics\n"
            f'  speak:  triton-tts say "Hello from Triton." -o hello.wav --url localhost:{args.http_port}\n'
            f"          triton-tts say 'Hello.' --protocol grpc --url localhost:{args.grpc_port} -o hi.wav\n"
            + (
                f"  health  http://localhost:{args.health_port}/ready (every instance alive)\n"
                if args.health_port
                else ""
            )
            + (
                f"  OpenAI  http://localhost:{args.gateway_port}/v1/audio/speech   "
                f"listen: http://localhost:{args.gateway_port}/\n"
                if args.gateway_port
                else ""
            )
            + (
                f"  Riva    localhost:{args.riva_port} (gRPC: Riva's TTS API, as NVIDIA plugins speak)\n"
                if args.gateway_port and args.riva_port
                else ""
            )
            + "  Ctrl-C stops the server.\n",
            flush=True,
        )
        assert server.process is not None
        return server.process.wait()
    except KeyboardInterrupt:
        # The watchdog and /ready first: stopping stubs are not to be healed, and the
        # probes take the pod out of rotation while what is in flight finishes.
        supervision.close()
        print("\ndraining: letting tts and tts_stream requests in flight finish...", flush=True)
        try:
            left = drain(server, args.drain_timeout)
        except KeyboardInterrupt:
            left = None  # a second signal: stop now
        if left:
            print(f"{left} request(s) still in flight after {args.drain_timeout:g} s", flush=True)
        print("stopping tritonserver...", flush=True)
        return server.stop() or 0
    except (RuntimeError, TimeoutError) as err:
        supervision.close()
        server.stop()  # first: a Triton left up (the gate's --exit-on-error=false) logs its stop
        print(f"triton-tts: {err}", file=sys.stderr)
        return 1
