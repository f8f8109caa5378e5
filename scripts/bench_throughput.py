#!/usr/bin/env python3
"""Decode-throughput benchmark for an OpenAI-compatible inference server.

rigrun playbooks copy this file to each GPU host and run it once per sweep
point; it needs nothing but Python >= 3.8 and its standard library.

Method ("catid's method")
-------------------------
Every request sends the same prompt: ``--input-len`` copies of one token id
(23066 by default) as a token-id list, ``"prompt": [23066, 23066, ...]``, to
``POST {url}/v1/completions`` with ``max_tokens = --output-len``,
``ignore_eos: true`` and ``temperature: 0``.  Why a token-id prompt:

* it is a *decode*-throughput test: the server generates exactly
  ``--output-len`` tokens per request (``ignore_eos``), whatever the model
  and its tokenizer, so numbers from different hosts and models compare;
* sending token ids skips tokenization and makes the input length exact;
* every request shares the same prefix, so a server with prefix caching
  (SGLang's radix cache, vLLM's automatic prefix caching) can serve the
  prompt from cache after the first request: what is measured is mostly
  generation, not prefill.

Load shape: for each concurrency level C, C worker threads (one keep-alive
HTTP connection each) first send C warm-up requests, which are not measured;
then, after all of them finished, the measured phase sends ``--num-requests``
requests (default 5 x C) from a shared queue, so that exactly C requests are
in flight until the queue runs dry.

Output: one JSON object per level on stdout (nothing else goes to stdout),
with the metric names of ``vllm bench serve --save-result`` so these results
sit in the same tables as vLLM's and SGLang's own tools; human progress goes
to stderr.  Token counts come from the server's ``usage``; with ``--stream``
the final usage chunk (``stream_options.include_usage``) is used, falling back
to counting content chunks when the server sends no usage.  The measured
phase's window is given on this host's wall clock (``measure_start_unix``,
``measure_end_unix``: ``duration`` apart), so that rigrun takes the GPU energy
per output token over the same seconds as the tokens, not over the whole
point (interpreter start and warm-up included).

Streaming metrics (``--stream``): TTFT is the time to the first content chunk,
TPOT is (e2e latency - TTFT) / (output tokens - 1) per request, ITL are the
gaps between successive content chunks (a server that batches several tokens
per chunk yields fewer, longer gaps).  All latencies are in milliseconds;
percentiles interpolate linearly, like numpy's default.  At very high
concurrency with ``--stream``, Python's GIL adds some jitter to per-chunk
timestamps; without ``--stream`` the client does almost no work per token.

Exit status: 0 when every level ran (failed requests are reported in the
JSON, under ``failed`` and ``errors``); 1, with one line on stderr, when the
server cannot be reached, lists no model, the results cannot be written, or
a level completed no request at all (its JSON line is still printed);
2 for bad arguments; 130 on Ctrl-C.

Example::

    python3 bench_throughput.py --url http://127.0.0.1:30000 \\
        --concurrency 1,4,16,32 --input-len 1000 --output-len 1000 --out-dir results
"""

import argparse
import array
import http.client
import json
import math
import os
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from typing import Dict, List, Optional, Tuple

PROG = "bench_throughput.py"
BACKEND = "rigrun-bench-throughput-py"
DEFAULT_URL = "http://127.0.0.1:30000"
DEFAULT_TOKEN_ID = 23066
THREAD_STACK_BYTES = 256 * 1024
PROGRESS_EVERY_S = 10.0
MODELS_TIMEOUT_S = 30.0
ERROR_BODY_CHARS = 200


class FatalError(Exception):
    """An expected failure that ends the run with one line on stderr."""


# --------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------

def log(message: str) -> None:
    """Write one line of human progress to stderr."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def percentile(sorted_values, pct: float) -> Optional[float]:
    """Return the pct-th percentile of an ascending sequence, or None if empty.

    Linear interpolation between the two closest ranks, which is numpy's
    default (``np.percentile(..., method="linear")``); pct=50 is the median.
    """
    n = len(sorted_values)
    if n == 0:
        return None
    rank = (n - 1) * pct / 100.0
    lo = int(math.floor(rank))
    hi = min(lo + 1, n - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (rank - lo)


def rounded(value: Optional[float], digits: int = 4) -> Optional[float]:
    """Round a metric for output, keeping None (undefined) as None."""
    return None if value is None else round(value, digits)


def describe_exception(exc: BaseException) -> Tuple[str, str]:
    """Map a network/protocol exception to (error kind, human description)."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection_refused", "connection refused"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timeout", "timed out"
    if isinstance(exc, socket.gaierror):
        return "dns_error", "cannot resolve the host name (%s)" % (exc.strerror or exc)
    if isinstance(exc, ssl.SSLError):
        return "tls_error", "TLS error (%s)" % exc
    if isinstance(exc, http.client.RemoteDisconnected):
        return "remote_disconnected", "server closed the connection without a response"
    if isinstance(exc, ConnectionResetError):
        return "connection_reset", "connection reset by the server"
    if isinstance(exc, (BrokenPipeError, ConnectionAbortedError)):
        return "connection_aborted", "connection aborted (%s)" % exc
    if isinstance(exc, http.client.HTTPException):
        return "protocol_error", "HTTP protocol error (%s: %s)" % (type(exc).__name__, exc)
    if isinstance(exc, OSError):
        reason = exc.strerror or str(exc)
        return "os_error", "network error (%s)" % reason
    return "exception_" + type(exc).__name__, "%s: %s" % (type(exc).__name__, exc)


def raise_open_file_limit(needed: int) -> None:
    """Raise the soft RLIMIT_NOFILE towards `needed` (one socket per worker)."""
    try:
        import resource  # POSIX only
    except ImportError:
        return
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < needed:
            target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            if target < needed:
                log("%s: warning: open-file limit is %d, fewer than the %d sockets needed"
                    % (PROG, target, needed))
    except (ValueError, OSError) as exc:
        log("%s: warning: cannot raise the open-file limit: %s" % (PROG, exc))


# --------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------

def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not an integer" % text)
    if value < 1:
        raise argparse.ArgumentTypeError("%r must be at least 1" % text)
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (token ids)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not an integer" % text)
    if value < 0:
        raise argparse.ArgumentTypeError("%r must not be negative" % text)
    return value


def positive_float(text: str) -> float:
    """argparse type: a number > 0 (seconds)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("%r is not a number" % text)
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError("%r must be a positive number of seconds" % text)
    return value


def concurrency_list(text: str) -> List[int]:
    """argparse type: one concurrency level or a comma list, e.g. ``1,4,16,32``."""
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p for p in parts):
        raise argparse.ArgumentTypeError(
            "%r is not a concurrency level or a comma list such as 1,4,16,32" % text)
    return [positive_int(p) for p in parts]


class Endpoint:
    """The server's base URL, split into what http.client needs."""

    def __init__(self, url: str):
        text = url.strip()
        if "://" not in text:
            text = "http://" + text
        parts = urllib.parse.urlsplit(text)
        if parts.scheme not in ("http", "https"):
            raise ValueError("scheme must be http or https")
        if not parts.hostname:
            raise ValueError("no host name")
        try:
            port = parts.port
        except ValueError:
            raise ValueError("invalid port")
        path = parts.path.rstrip("/")
        if path.endswith("/v1"):  # accept both http://h:p and http://h:p/v1
            path = path[:-3]
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = port or (443 if self.scheme == "https" else 80)
        self.base_path = path
        host_text = "[%s]" % self.host if ":" in self.host else self.host
        self.display = "%s://%s:%d%s" % (self.scheme, host_text, self.port, path)

    def url(self, path: str) -> str:
        """The full URL of an API path, for messages."""
        return self.display + path

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        """A new (lazily connecting) HTTP connection to the server."""
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parse and validate the command line (argparse exits 2 on bad input)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Decode-throughput benchmark (catid's method: N copies of one token id, "
                    "ignore_eos) against an OpenAI-compatible /v1/completions endpoint. "
                    "Prints one JSON line per concurrency level on stdout.")
    parser.add_argument("--url", default=DEFAULT_URL,
                        help="server base URL (default: %(default)s)")
    parser.add_argument("--model", default=None,
                        help="model name (default: the first id listed by GET {url}/v1/models)")
    parser.add_argument("--concurrency", type=concurrency_list, default=[1], metavar="C[,C...]",
                        help="requests in flight: one level or a comma list, e.g. 1,4,16,32 "
                             "(default: 1)")
    parser.add_argument("--input-len", type=positive_int, default=1000, metavar="N",
                        help="prompt length in tokens (default: %(default)s)")
    parser.add_argument("--output-len", type=positive_int, default=1000, metavar="N",
                        help="tokens generated per request, max_tokens (default: %(default)s)")
    parser.add_argument("--token-id", type=non_negative_int, default=DEFAULT_TOKEN_ID,
                        metavar="ID", help="the token id repeated as the prompt "
                                           "(default: %(default)s)")
    parser.add_argument("--num-requests", type=positive_int, default=None, metavar="N",
                        help="measured requests per level (default: 5 x C), sent after C "
                             "unmeasured warm-up requests")
    parser.add_argument("--stream", action="store_true",
                        help="stream responses (SSE) and also measure TTFT, TPOT and ITL")
    parser.add_argument("--out-dir", default=None, metavar="DIR",
                        help="also write each level's JSON to "
                             "DIR/throughput_c{C}_in{I}_out{O}.json")
    parser.add_argument("--timeout", type=positive_float, default=3600.0, metavar="SECONDS",
                        help="per-request timeout (default: %(default)s)")
    args = parser.parse_args(argv)
    try:
        args.endpoint = Endpoint(args.url)
    except ValueError as exc:
        parser.error("argument --url: invalid URL %r: %s" % (args.url, exc))
    if args.model is not None and not args.model.strip():
        parser.error("argument --model: must not be empty")
    return args


# --------------------------------------------------------------------------
# Talking to the server
# --------------------------------------------------------------------------

def http_error_detail(status: int, reason: str, body: bytes) -> str:
    """'HTTP 500 Internal Server Error: <first 200 chars of the body>'."""
    text = body.decode("utf-8", "replace").strip().replace("\n", " ")
    if len(text) > ERROR_BODY_CHARS:
        text = text[:ERROR_BODY_CHARS] + "..."
    return "HTTP %d %s: %s" % (status, reason, text or "(empty body)")


def list_models(endpoint: Endpoint) -> List[str]:
    """Return the model ids of GET /v1/models; raise FatalError if unreachable."""
    url = endpoint.url("/v1/models")
    conn = endpoint.connect(MODELS_TIMEOUT_S)
    try:
        conn.request("GET", endpoint.base_path + "/v1/models",
                     headers={"Accept": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
    except Exception as exc:  # network failures are expected here
        kind, detail = describe_exception(exc)
        hint = " — is the server running?" if kind in (
            "connection_refused", "timeout", "remote_disconnected", "connection_reset") else ""
        raise FatalError("cannot reach %s: %s%s" % (url, detail, hint))
    finally:
        conn.close()
    if resp.status != 200:
        raise FatalError("%s answered %s" % (url, http_error_detail(resp.status, resp.reason, body)))
    try:
        data = json.loads(body.decode("utf-8"))
        ids = [str(m["id"]) for m in data.get("data", []) if isinstance(m, dict) and "id" in m]
    except (ValueError, AttributeError, TypeError):
        raise FatalError("%s did not answer a JSON model list: %r" % (url, body[:ERROR_BODY_CHARS]))
    return ids


def resolve_model(args: argparse.Namespace) -> str:
    """Check the server is reachable and pick the model (--model or the first listed)."""
    try:
        ids = list_models(args.endpoint)
    except FatalError as exc:
        if args.model is None or str(exc).startswith("cannot reach"):
            raise
        log("%s: warning: %s; using --model %s anyway" % (PROG, exc, args.model))
        return args.model
    if args.model is not None:
        if not ids:
            log("%s: warning: %s lists no model; using --model %s anyway"
                % (PROG, args.endpoint.url("/v1/models"), args.model))
        elif args.model not in ids:
            log("%s: warning: model %r is not among those listed by %s: %s"
                % (PROG, args.model, args.endpoint.url("/v1/models"), ", ".join(ids)))
        return args.model
    if not ids:
        raise FatalError("%s lists no model — is a model loaded?" % args.endpoint.url("/v1/models"))
    return ids[0]


class RequestResult:
    """What one request measured (times from time.perf_counter, in seconds)."""

    __slots__ = ("ok", "kind", "detail", "start", "end", "ttft", "itls",
                 "prompt_tokens", "output_tokens")

    def __init__(self):
        self.ok = False
        self.kind = ""          # error kind when not ok
        self.detail = ""        # human description when not ok
        self.start = 0.0
        self.end = 0.0
        self.ttft = None        # type: Optional[float]
        self.itls = array.array("d")
        self.prompt_tokens = 0
        self.output_tokens = 0

    def fail(self, kind: str, detail: str) -> "RequestResult":
        """Mark the request failed and return self."""
        self.ok = False
        self.kind = kind
        self.detail = detail
        self.end = time.perf_counter()
        return self


def build_request_body(model: str, args: argparse.Namespace) -> bytes:
    """The JSON body shared by every request of a run (built once)."""
    payload = {
        "model": model,
        "prompt": [args.token_id] * args.input_len,
        "max_tokens": args.output_len,
        "ignore_eos": True,
        "temperature": 0,
        "stream": bool(args.stream),
    }
    if args.stream:
        payload["stream_options"] = {"include_usage": True}
    return json.dumps(payload, separators=(",", ":")).encode("utf-8")


class Client:
    """One worker's keep-alive connection and the completion request it sends."""

    STALE_ERRORS = (http.client.RemoteDisconnected, ConnectionResetError,
                    BrokenPipeError, ConnectionAbortedError)

    def __init__(self, endpoint: Endpoint, body: bytes, stream: bool, timeout: float,
                 input_len: int, output_len: int):
        self.endpoint = endpoint
        self.path = endpoint.base_path + "/v1/completions"
        self.body = body
        self.stream = stream
        self.timeout = timeout
        self.input_len = input_len
        self.output_len = output_len
        self.conn = None  # type: Optional[http.client.HTTPConnection]
        self.reused = False
        self.headers = {"Content-Type": "application/json",
                        "Accept": "text/event-stream" if stream else "application/json"}

    def close(self) -> None:
        """Drop the connection (the next request opens a new one)."""
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        self.reused = False

    def complete(self) -> RequestResult:
        """Send one completion request; never raises for network or server errors."""
        result = RequestResult()
        try:
            resp = self._send(result)
            if resp.status != 200:
                body = resp.read()
                if resp.will_close:
                    self.close()
                return result.fail("http_%d" % resp.status,
                                   http_error_detail(resp.status, resp.reason, body))
            if self.stream:
                self._read_stream(resp, result)
            else:
                self._read_json(resp, result)
            if resp.will_close:
                self.close()
            elif self.conn is not None:  # still open: the next request reuses it
                self.reused = True
        except Exception as exc:  # report, never crash the worker
            self.close()
            kind, detail = describe_exception(exc)
            result.fail(kind, detail)
        return result

    def _send(self, result: RequestResult) -> http.client.HTTPResponse:
        """POST the body; retry once on a fresh connection if a kept-alive one went stale."""
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = self.endpoint.connect(self.timeout)
            result.start = time.perf_counter()
            try:
                self.conn.request("POST", self.path, body=self.body, headers=self.headers)
                return self.conn.getresponse()
            except self.STALE_ERRORS:
                was_reused = self.reused
                self.close()
                if attempt == 2 or not was_reused:
                    raise
        raise AssertionError("unreachable")

    def _read_json(self, resp: http.client.HTTPResponse, result: RequestResult) -> None:
        """Read a non-streamed completion and take its token counts from usage."""
        body = resp.read()
        result.end = time.perf_counter()
        try:
            data = json.loads(body.decode("utf-8"))
        except ValueError:
            result.fail("invalid_response", "response is not JSON: %r" % body[:ERROR_BODY_CHARS])
            return
        if not isinstance(data, dict):
            result.fail("invalid_response", "response is not a JSON object")
            return
        if data.get("error") or data.get("object") == "error":
            result.fail("server_error", "server error: %s" % json.dumps(data)[:ERROR_BODY_CHARS])
            return
        usage = data.get("usage") or {}
        result.prompt_tokens = int(usage.get("prompt_tokens") or self.input_len)
        # Without usage, ignore_eos means the server generated max_tokens tokens.
        result.output_tokens = int(usage.get("completion_tokens") or
                                   (0 if usage else self.output_len))
        result.ok = True

    def _read_stream(self, resp: http.client.HTTPResponse, result: RequestResult) -> None:
        """Read an SSE stream: time each content chunk, take counts from the usage chunk."""
        deadline = result.start + self.timeout
        last_event = None  # type: Optional[float]
        chunks = 0
        usage = None
        finished = done = False
        while True:
            line = resp.readline()
            now = time.perf_counter()
            if not line:
                break
            if now > deadline:
                raise socket.timeout("request took longer than %g s" % self.timeout)
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, comments (": ping"), event names
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            try:
                event = json.loads(data.decode("utf-8"))
            except ValueError:
                result.fail("invalid_response", "bad SSE data: %r" % data[:ERROR_BODY_CHARS])
                self.close()
                return
            if not isinstance(event, dict):
                continue
            if event.get("error") or event.get("object") == "error":
                result.fail("server_error",
                            "server error in stream: %s" % json.dumps(event)[:ERROR_BODY_CHARS])
                self.close()
                return
            if event.get("usage"):
                usage = event["usage"]
            choices = event.get("choices") or []
            if not choices or not isinstance(choices[0], dict):
                continue
            choice = choices[0]
            if choice.get("finish_reason") is not None:
                finished = True
            # A chunk carries generated token(s) if it has text; an empty chunk in
            # mid-stream counts too (a detokenizer may hold back partial
            # characters), but an empty chunk that only reports finish_reason does not.
            if not choice.get("text") and choice.get("finish_reason") is not None:
                continue
            chunks += 1
            if last_event is None:
                result.ttft = now - result.start
            else:
                result.itls.append(now - last_event)
            last_event = now
        if done:
            resp.read()  # consume the end of the chunked body so the connection is reusable
        result.end = time.perf_counter()
        if not (done or finished or usage):
            result.fail("incomplete_stream",
                        "stream ended after %d chunks without finish_reason or [DONE]" % chunks)
            self.close()
            return
        if usage:
            result.prompt_tokens = int(usage.get("prompt_tokens") or self.input_len)
            result.output_tokens = int(usage.get("completion_tokens") or chunks)
        else:
            result.prompt_tokens = self.input_len
            result.output_tokens = chunks
        result.ok = True


# --------------------------------------------------------------------------
# One concurrency level
# --------------------------------------------------------------------------

class LevelRun:
    """Shared state of the workers of one concurrency level."""

    def __init__(self, concurrency: int, num_requests: int):
        self.concurrency = concurrency
        self.num_requests = num_requests
        self.lock = threading.Lock()
        self.next_index = 0
        self.warmup = []    # type: List[RequestResult]
        self.results = []   # type: List[RequestResult]
        self.measure_start = None  # type: Optional[float]
        # The same moment on the wall clock, so that the record can say where its window lies.
        self.measure_start_unix = None  # type: Optional[float]
        self.barrier = threading.Barrier(concurrency, action=self._start_measuring)

    def _start_measuring(self) -> None:
        """Barrier action: every warm-up request is done; the measured phase starts now."""
        self.measure_start = time.perf_counter()
        self.measure_start_unix = time.time()

    def take(self) -> bool:
        """Claim the next measured request; False when all have been claimed."""
        with self.lock:
            if self.next_index >= self.num_requests:
                return False
            self.next_index += 1
            return True

    def worker(self, client: Client) -> None:
        """One warm-up request, wait for the others, then measured requests until done."""
        try:
            self.warmup.append(client.complete())
            try:
                self.barrier.wait()
            except threading.BrokenBarrierError:
                return
            while self.take():
                self.results.append(client.complete())
        finally:
            client.close()


def run_level(args: argparse.Namespace, model: str, body: bytes, concurrency: int) -> dict:
    """Run warm-up and measured phase at one concurrency level; return its metrics."""
    num_requests = args.num_requests or 5 * concurrency
    run = LevelRun(concurrency, num_requests)
    log("C=%d: %d warm-up request(s), then %d measured (in=%d, out=%d, %s)"
        % (concurrency, concurrency, num_requests, args.input_len, args.output_len,
           "streaming" if args.stream else "not streaming"))
    if num_requests < concurrency:
        log("C=%d: warning: only %d measured request(s), so fewer than %d will be in flight"
            % (concurrency, num_requests, concurrency))
    threads = []
    for i in range(concurrency):
        client = Client(args.endpoint, body, args.stream, args.timeout,
                        args.input_len, args.output_len)
        t = threading.Thread(target=run.worker, args=(client,),
                             name="bench-%d" % i, daemon=True)
        t.start()
        threads.append(t)

    warmup_reported = False
    last_progress = time.monotonic()
    for t in threads:
        while t.is_alive():
            t.join(0.25)  # short joins keep Ctrl-C prompt
            if run.measure_start is not None and not warmup_reported:
                warmup_reported = True
                report_warmup(run)
            if time.monotonic() - last_progress >= PROGRESS_EVERY_S:
                last_progress = time.monotonic()
                report_progress(run)
    if not warmup_reported:
        report_warmup(run)
    metrics = summarize(run, args, model)
    log("C=%d: %d/%d completed in %.2f s: %.1f output tok/s, %.2f req/s%s"
        % (concurrency, metrics["completed"], num_requests, metrics["duration"],
           metrics["output_throughput"], metrics["request_throughput"],
           "" if not metrics["failed"] else ", %d failed %s"
           % (metrics["failed"], json.dumps(metrics["errors"]))))
    return metrics


def report_warmup(run: LevelRun) -> None:
    """Log the end of the warm-up, with the first error if any warm-up request failed."""
    failed = [r for r in run.warmup if not r.ok]
    if failed:
        log("C=%d: warm-up done, %d of %d failed (first: %s)"
            % (run.concurrency, len(failed), len(run.warmup), failed[0].detail))
    else:
        log("C=%d: warm-up done" % run.concurrency)


def report_progress(run: LevelRun) -> None:
    """Log how far the measured phase has got."""
    if run.measure_start is None:
        log("C=%d: warming up, %d/%d done" % (run.concurrency, len(run.warmup), run.concurrency))
        return
    results = list(run.results)
    failed = sum(1 for r in results if not r.ok)
    log("C=%d: %d/%d done%s, %.0f s"
        % (run.concurrency, len(results), run.num_requests,
           " (%d failed)" % failed if failed else "",
           time.perf_counter() - run.measure_start))


def latency_stats(prefix: str, values_s: List[float], into: Dict[str, object]) -> None:
    """Add mean/median/p99 of latencies (seconds in, ms out) under vLLM's names."""
    ms = sorted(v * 1000.0 for v in values_s)
    into["mean_%s_ms" % prefix] = rounded(sum(ms) / len(ms)) if ms else None
    into["median_%s_ms" % prefix] = rounded(percentile(ms, 50))
    into["p99_%s_ms" % prefix] = rounded(percentile(ms, 99))


def summarize(run: LevelRun, args: argparse.Namespace, model: str) -> dict:
    """Aggregate one level's measured requests into the result record."""
    results = list(run.results)
    ok = [r for r in results if r.ok]
    failed = [r for r in results if not r.ok]
    start = run.measure_start if run.measure_start is not None else time.perf_counter()
    start_unix = run.measure_start_unix if run.measure_start_unix is not None else time.time()
    end = max((r.end for r in results), default=start)
    duration = max(end - start, 1e-9)
    total_in = sum(r.prompt_tokens for r in ok)
    total_out = sum(r.output_tokens for r in ok)

    metrics = {
        "backend": BACKEND,
        "model": model,
        "stream": bool(args.stream),
        "input_len": args.input_len,
        "output_len": args.output_len,
        "max_concurrency": run.concurrency,
        "num_prompts": run.num_requests,
        "completed": len(ok),
        "failed": len(failed),
        "duration": rounded(duration),
        # The measured window on this host's clock: what GPU energy per token is taken over.
        "measure_start_unix": round(start_unix, 3),
        "measure_end_unix": round(start_unix + duration, 3),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": rounded(len(ok) / duration),
        "output_throughput": rounded(total_out / duration),
        "total_token_throughput": rounded((total_in + total_out) / duration),
    }  # type: Dict[str, object]
    if args.stream:
        latency_stats("ttft", [r.ttft for r in ok if r.ttft is not None], metrics)
        latency_stats("tpot", [(r.end - r.start - r.ttft) / (r.output_tokens - 1)
                               for r in ok if r.ttft is not None and r.output_tokens > 1],
                      metrics)
        itls = []  # type: List[float]
        for r in ok:
            itls.extend(r.itls)
        latency_stats("itl", itls, metrics)
    latency_stats("e2el", [r.end - r.start for r in ok], metrics)
    if failed:
        errors = {}  # type: Dict[str, int]
        for r in failed:
            errors[r.kind] = errors.get(r.kind, 0) + 1
        metrics["errors"] = errors
        first = {}  # type: Dict[str, str]
        for r in failed:
            first.setdefault(r.kind, r.detail)
        for kind, detail in sorted(first.items()):
            log("C=%d: %d request(s) failed with %s, e.g. %s"
                % (run.concurrency, errors[kind], kind, detail))
    short = sum(1 for r in ok if r.output_tokens != args.output_len)
    if short:
        log("C=%d: warning: %d request(s) returned a token count other than %d "
            "(does the server honour ignore_eos?)" % (run.concurrency, short, args.output_len))
    metrics["date"] = time.strftime("%Y%m%d-%H%M%S")
    return metrics


# --------------------------------------------------------------------------
# Output and main
# --------------------------------------------------------------------------

def emit(metrics: dict, out_dir: Optional[str]) -> None:
    """Print the level's JSON line on stdout and, with --out-dir, write its file."""
    line = json.dumps(metrics)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    if out_dir:
        name = "throughput_c%d_in%d_out%d.json" % (
            metrics["max_concurrency"], metrics["input_len"], metrics["output_len"])
        path = os.path.join(out_dir, name)
        tmp = path + ".tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(line + "\n")
            os.replace(tmp, path)
        except OSError as exc:
            raise FatalError("cannot write %s: %s" % (path, exc.strerror or exc))
        log("wrote %s" % path)


def run(args: argparse.Namespace) -> int:
    """Run every requested concurrency level; return the exit status."""
    if args.out_dir:
        try:
            os.makedirs(args.out_dir, exist_ok=True)
        except OSError as exc:
            raise FatalError("cannot create --out-dir %s: %s" % (args.out_dir, exc.strerror or exc))
    model = resolve_model(args)
    log("%s: %s, model %s" % (PROG, args.endpoint.display, model))
    raise_open_file_limit(max(args.concurrency) + 64)
    threading.stack_size(THREAD_STACK_BYTES)
    body = build_request_body(model, args)
    empty = []
    for concurrency in args.concurrency:
        metrics = run_level(args, model, body, concurrency)
        emit(metrics, args.out_dir)
        if not metrics["completed"]:
            empty.append(str(concurrency))
    if empty:
        # A level with no completed request measured nothing: the caller must see a failure.
        log("%s: no request completed at concurrency %s" % (PROG, ", ".join(empty)))
        return 1
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point: expected failures become one stderr line and a non-zero status."""
    args = parse_args(argv)
    try:
        return run(args)
    except FatalError as exc:
        log("%s: %s" % (PROG, exc))
        return 1
    except KeyboardInterrupt:
        log("%s: interrupted" % PROG)
        sys.stdout.flush()
        os._exit(130)  # do not wait for worker threads blocked in socket reads
    except BrokenPipeError:
        # stdout was closed by the reader; nothing more can be reported there
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        log("%s: stdout closed" % PROG)
        return 1


if __name__ == "__main__":
    sys.exit(main())
