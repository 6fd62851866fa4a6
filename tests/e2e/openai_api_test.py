#!/usr/bin/env python3
"""The HTTP API (docs/api.md) end to end: the real q38-server with two CPU worker ranks, driven by
the official openai client and plain urllib, on the random tiny checkpoint (byte-level tokenizer,
noise for text, no chat template) and on the trained small model (a real tokenizer and chat
template, so the chat tests run there).

  openai_api_test.py --server PATH --worker PATH --make_checkpoint PATH --small_model DIR [unittest args]
"""
import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import openai

ARGS = None  # the parsed command line, set in __main__

# Loopback only: a proxy named in the environment must never see these requests.
URLLIB = urllib.request.build_opener(urllib.request.ProxyHandler({}))

CANCELLED_BY_CLIENT = 'q38_requests_cancelled_total{by="client"}'  # server/metrics.cc
MAX_CONTEXT = 1024
PROMPT = "The quick brown fox"


def http(method, url, body=None, timeout=60):
    """(status, parsed JSON body or raw text) for one request; HTTP errors are answers, not raises."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with URLLIB.open(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


class Server:
    """One q38-server (TP2, CPU workers) serving the HTTP API on an ephemeral port."""

    def __init__(self, model_dir):
        self.dir = tempfile.mkdtemp(prefix="q38_openai_e2e_")
        self.log = os.path.join(self.dir, "server.log")
        ready = os.path.join(self.dir, "ready.json")
        cmd = [ARGS.server, f"--model={model_dir}", "--tp=2", "--listen=127.0.0.1:0", "--metrics=127.0.0.1:0",
               "--http=127.0.0.1:0", f"--worker_binary={ARGS.worker}", f"--run_dir={self.dir}/run",
               f"--ready_file={ready}", "--startup_timeout_s=60", f"--max_context={MAX_CONTEXT}", "--queue_size=4"]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            info = self._wait_ready(ready)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)  # the error carries the log's tail
            raise
        self.http_port, self.metrics_port = info["http_port"], info["metrics_port"]
        self.base = f"http://127.0.0.1:{self.http_port}"

    def _wait_ready(self, ready):
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"q38-server exited with code {self.proc.returncode} during startup:\n{self.tail()}")
            info = self._read_ready(ready)
            if info is not None:
                return info
            if time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"q38-server wrote no ready file in 120 s:\n{self.tail()}")
            time.sleep(0.1)

    @staticmethod
    def _read_ready(path):
        # The file may be seen half written: not ready until it parses and names the HTTP port.
        try:
            with open(path) as f:
                info = json.load(f)
        except (OSError, ValueError):
            return None
        return info if "http_port" in info and "metrics_port" in info else None

    def tail(self, lines=80):
        with open(self.log, errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    def metric(self, series):
        """The value of one exact series (name with labels) on /metrics, or None when absent."""
        _, text = http("GET", f"http://127.0.0.1:{self.metrics_port}/metrics")
        for line in str(text).splitlines():
            name, _, value = line.rpartition(" ")
            if name == series:
                return float(value)
        return None

    def stop(self):
        """SIGTERM, then the exit code (-1: still running after 60 s, killed)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return -1


class ServerTestCase(unittest.TestCase):
    """A server per class; a failing test prints the server log's tail."""

    server = None
    client = None
    client_timeout_s = 60

    @classmethod
    def start(cls, model_dir):
        cls.server = Server(model_dir)
        # No retries: each request is sent once, so every status is the server's first answer.
        cls.client = openai.OpenAI(base_url=cls.server.base + "/v1", api_key="unused", max_retries=0,
                                   timeout=cls.client_timeout_s, http_client=openai.DefaultHttpxClient(trust_env=False))

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        code = cls.server.stop()
        if code != 0:
            sys.stderr.write(f"---- server log {cls.server.log} ----\n{cls.server.tail()}---- end ----\n")
        shutil.rmtree(cls.server.dir, ignore_errors=True)
        assert code == 0, f"q38-server exited with code {code} after SIGTERM, want 0"

    def run(self, result=None):
        if result is None:
            return super().run()
        before = len(result.failures) + len(result.errors)
        out = super().run(result)
        if len(result.failures) + len(result.errors) > before and self.server is not None:
            sys.stderr.write(f"---- server log tail ({self.id()}) ----\n{self.server.tail()}---- end ----\n")
        return out

    def assert_error_body(self, exc, status, type_, param):
        """The error is OpenAI's body with this status, type and (when given) param."""
        self.assertEqual(exc.status_code, status, f"status of {exc}")
        body = exc.response.json()
        self.assertIsInstance(body.get("error"), dict, f"no error object in {body}")
        err = body["error"]
        self.assertIsInstance(err.get("message"), str, f"error.message in {body}")
        self.assertTrue(err["message"], f"empty error.message in {body}")
        self.assertEqual(err.get("type"), type_, f"error.type in {body}")
        if param is not None:
            self.assertEqual(err.get("param"), param, f"error.param in {body}")


class TinyModelTest(ServerTestCase):
    """The random tiny checkpoint: one token per byte for prompts; its output is noise, so the tests
    compare the server with itself (greedy, seeds, streaming) and with the API's invariants."""

    @classmethod
    def setUpClass(cls):
        cls.checkpoints = tempfile.mkdtemp(prefix="q38_openai_tiny_")
        model = os.path.join(cls.checkpoints, "tiny")  # the served id is the directory's name
        try:
            made = subprocess.run([ARGS.make_checkpoint, f"--out={model}", "--seed=1"], capture_output=True, text=True)
            if made.returncode != 0:
                raise RuntimeError(f"q38-make-checkpoint exited with code {made.returncode}: {made.stderr}")
            cls.start(model)
        except BaseException:
            shutil.rmtree(cls.checkpoints, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.checkpoints, ignore_errors=True)

    def complete(self, **kw):
        """A greedy completion of PROMPT that runs to max_tokens; kw overrides any of it."""
        extra_body = {"ignore_eos": True, **kw.pop("extra_body", {})}
        args = {"model": "tiny", "prompt": PROMPT, "max_tokens": 8, "temperature": 0, **kw}
        return self.client.completions.create(extra_body=extra_body, **args)

    def test_models_lists_the_one_served_model(self):
        models = self.client.models.list().data
        self.assertEqual([m.id for m in models], ["tiny"], "served model ids")
        m = models[0].to_dict()
        self.assertEqual(m.get("object"), "model", f"model object: {m}")
        self.assertEqual(m.get("owned_by"), "q38", f"owned_by: {m}")
        self.assertEqual(m.get("max_model_len"), MAX_CONTEXT, f"max_model_len is --max_context: {m}")

    def test_greedy_completion_usage_and_determinism(self):
        a = self.complete()
        self.assertEqual(a.object, "text_completion")
        self.assertTrue(a.id.startswith("cmpl-"), f"id {a.id!r}")
        self.assertEqual(a.model, "tiny")
        self.assertEqual(len(a.choices), 1, "choices")
        self.assertEqual(a.choices[0].finish_reason, "length", "ignore_eos runs to max_tokens")
        self.assertEqual(a.usage.completion_tokens, 8, "completion_tokens")
        self.assertEqual(a.usage.prompt_tokens, len(PROMPT.encode()), "prompt_tokens: one token per byte")
        self.assertEqual(a.usage.total_tokens, a.usage.prompt_tokens + a.usage.completion_tokens, "total_tokens")
        b = self.complete()
        self.assertEqual(b.choices[0].text, a.choices[0].text, "the same greedy request gave different text")

    def test_prompt_as_token_ids(self):
        ids = [1000, 17, 99, 512, 3, 77]
        r = self.complete(prompt=ids, max_tokens=4)
        self.assertEqual(r.usage.prompt_tokens, len(ids), "prompt_tokens of a token-id prompt")
        self.assertEqual(r.usage.completion_tokens, 4, "completion_tokens")
        self.assertEqual(r.choices[0].finish_reason, "length")

    def test_streaming_equals_non_streaming(self):
        full = self.complete(max_tokens=16)
        chunks = list(self.complete(max_tokens=16, stream=True))
        self.assertGreaterEqual(len(chunks), 2, "a stream of one chunk was delivered at the end, not streamed")
        for c in chunks:
            self.assertEqual(c.object, "text_completion", f"chunk object in {c}")
            self.assertEqual(len(c.choices), 1, f"choices of {c}")
        self.assertEqual("".join(c.choices[0].text for c in chunks), full.choices[0].text,
                         "streamed text differs from the non-streamed text")
        self.assertEqual(chunks[-1].choices[0].finish_reason, "length", "last chunk's finish_reason")
        self.assertEqual([c.choices[0].finish_reason for c in chunks[:-1]], [None] * (len(chunks) - 1),
                         "finish_reason before the last chunk")

        chunks = list(self.complete(max_tokens=16, stream=True, stream_options={"include_usage": True}))
        last, body = chunks[-1], chunks[:-1]
        self.assertEqual(last.choices, [], "the usage chunk has no choices")
        self.assertIsNotNone(last.usage, "include_usage: the last chunk carries usage")
        self.assertEqual((last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens),
                         (len(PROMPT.encode()), 16, len(PROMPT.encode()) + 16), "streamed usage")
        self.assertEqual("".join(c.choices[0].text for c in body), full.choices[0].text,
                         "streamed text (with usage) differs from the non-streamed text")
        self.assertEqual(body[-1].choices[0].finish_reason, "length", "finish_reason of the chunk before usage")

    def test_completion_logprobs(self):
        full = self.complete(max_tokens=16, logprobs=5)
        n = full.usage.completion_tokens
        lp = full.choices[0].logprobs
        self.assertIsNotNone(lp, "logprobs=5 returned no logprobs")
        for field in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
            self.assertEqual(len(getattr(lp, field)), n, f"logprobs.{field} has one entry per completion token")
        self.assertEqual(lp.text_offset, sorted(lp.text_offset), "text_offset decreases")
        for i, (token, chosen, top) in enumerate(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs)):
            self.assertLessEqual(chosen, 0, f"token {i} logprob")
            # Keyed by text: tokens of one text (all unknown ids are "", all high bytes U+FFFD) merge.
            self.assertTrue(1 <= len(top) <= 5, f"token {i}: {len(top)} top_logprobs for logprobs=5: {top}")
            self.assertIn(token, top, f"token {i}: the greedy token {token!r} is not among its top_logprobs")
            self.assertTrue(all(v <= 0 for v in top.values()), f"token {i}: a top logprob above 0: {top}")
            # Greedy: nothing beats the chosen token; with 5 distinct texts none merged, so it is the max.
            self.assertLessEqual(max(top.values()), chosen + 1e-6, f"token {i}: an alternative above greedy: {top}")
            if len(top) == 5:
                self.assertAlmostEqual(max(top.values()), chosen, delta=1e-6, msg=f"token {i}: greedy is not the max")

        chunks = list(self.complete(max_tokens=16, logprobs=5, stream=True))
        streamed = [c.choices[0].logprobs for c in chunks if c.choices[0].logprobs is not None]
        tokens = [t for s in streamed for t in s.tokens]
        chosen = [v for s in streamed for v in s.token_logprobs]
        tops = [t for s in streamed for t in s.top_logprobs]
        self.assertEqual(tokens, lp.tokens, "streamed logprobs tokens differ")
        self.assertEqual(len(chosen), n, "streamed token_logprobs count")
        for i, (a, b) in enumerate(zip(chosen, lp.token_logprobs)):
            self.assertAlmostEqual(a, b, delta=1e-5, msg=f"token {i}: streamed vs non-streamed logprob")
        for i, (a, b) in enumerate(zip(tops, lp.top_logprobs)):
            self.assertEqual(a.keys(), b.keys(), f"token {i}: streamed vs non-streamed top_logprobs texts")
            for k in a:
                self.assertAlmostEqual(a[k], b[k], delta=1e-5, msg=f"token {i}, {k!r}: streamed vs non-streamed")

    def test_same_seed_same_sample(self):
        def sampled(seed):
            r = self.complete(max_tokens=16, temperature=1.0, seed=seed, logprobs=1)
            return r.choices[0].text, r.choices[0].logprobs.token_logprobs

        (text_a, lp_a), (text_b, lp_b) = sampled(7), sampled(7)
        self.assertEqual(text_a, text_b, "seed 7 twice gave different text")
        self.assertEqual(len(lp_a), len(lp_b), "seed 7 twice: token counts")
        # The logprob of each sampled token fingerprints the tokens where their text is empty.
        for i, (a, b) in enumerate(zip(lp_a, lp_b)):
            self.assertAlmostEqual(a, b, delta=1e-6, msg=f"seed 7 twice: token {i} differs")

    def test_stop_string_ends_the_text_before_it(self):
        greedy = self.complete(max_tokens=64).choices[0].text
        # A stop string that first occurs at p ≥ 1 and holds no U+FFFD (bytes that were never a character).
        p = next((p for p in range(1, len(greedy) - 1)
                  if "\ufffd" not in greedy[p:p + 2] and greedy.find(greedy[p:p + 2]) == p), None)
        if p is None:
            self.skipTest(f"no usable 2-character stop string in the greedy text {greedy!r}")
        stop = greedy[p:p + 2]
        r = self.complete(max_tokens=64, stop=[stop])
        self.assertEqual(r.choices[0].text, greedy[:p], f"text with stop {stop!r} (greedy text {greedy!r})")
        self.assertEqual(r.choices[0].finish_reason, "stop", f"finish_reason with stop {stop!r}")

    def test_refused_requests(self):
        bad = "invalid_request_error"
        cases = [
            ({"n": 2}, openai.BadRequestError, 400, bad, "n"),
            ({"temperature": -1}, openai.BadRequestError, 400, bad, "temperature"),
            ({"presence_penalty": 0.5}, openai.BadRequestError, 400, bad, "presence_penalty"),
            ({"extra_body": {"bogus_field": 1}}, openai.BadRequestError, 400, bad, "bogus_field"),
            ({"max_tokens": 2000}, openai.BadRequestError, 400, bad, "max_tokens"),  # past --max_context 1024
            ({"logprobs": 21}, openai.BadRequestError, 400, bad, "logprobs"),
            ({"model": "nope"}, openai.NotFoundError, 404, "not_found_error", None),
        ]
        for kw, exc_type, status, type_, param in cases:
            with self.subTest(**{k: str(v) for k, v in kw.items()}):
                with self.assertRaises(exc_type) as cm:
                    self.complete(max_tokens=kw.pop("max_tokens", 4), **kw)
                self.assert_error_body(cm.exception, status, type_, param)
        # None of it reached the workers' harm: a good request still runs.
        self.assertEqual(self.complete(max_tokens=2).usage.completion_tokens, 2, "a request after the refused ones")

    def test_disconnect_mid_stream_cancels(self):
        before = self.server.metric(CANCELLED_BY_CLIENT) or 0
        stream = self.complete(max_tokens=1000, stream=True)
        chunks = iter(stream)
        next(chunks)
        next(chunks)
        stream.close()
        # The group is free again: the next request does not wait out the 1000 tokens.
        t0 = time.monotonic()
        r = self.complete(max_tokens=2, timeout=30)
        self.assertEqual(r.usage.completion_tokens, 2, "the request after the disconnect")
        self.assertLess(time.monotonic() - t0, 10, "the request after the disconnect waited for the abandoned one")
        deadline = time.monotonic() + 10
        while (self.server.metric(CANCELLED_BY_CLIENT) or 0) <= before and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertGreater(self.server.metric(CANCELLED_BY_CLIENT) or 0, before,
                           f"{CANCELLED_BY_CLIENT} did not grow after the client closed its stream")

    def test_tokenize_and_detokenize(self):
        status, tok = http("POST", self.server.base + "/tokenize", {"prompt": "hello"})
        self.assertEqual(status, 200, f"/tokenize: {tok}")
        self.assertEqual(tok.get("count"), 5, f"/tokenize count: {tok}")
        self.assertEqual(tok.get("tokens"), list(b"hello"), f"/tokenize tokens (byte-level: ids are the bytes): {tok}")
        self.assertEqual(tok.get("max_model_len"), MAX_CONTEXT, f"/tokenize max_model_len: {tok}")
        status, detok = http("POST", self.server.base + "/detokenize", {"tokens": tok["tokens"]})
        self.assertEqual(status, 200, f"/detokenize: {detok}")
        self.assertEqual(detok, {"prompt": "hello"}, "/detokenize of /tokenize")

    def test_health(self):
        status, body = http("GET", self.server.base + "/health")
        self.assertEqual(status, 200, f"/health of a ready server: {body}")


class SmallModelTest(ServerTestCase):
    """The trained small model: a real answer through the chat template, greedy."""

    client_timeout_s = 300  # 96 tokens of a real model on two CPU ranks of a busy machine
    QUESTION = [{"role": "user", "content": "Compute 49 × 34. Write RESULT=<answer> on the last line."}]
    _answer = None

    @classmethod
    def setUpClass(cls):
        cls.start(ARGS.small_model)

    @classmethod
    def answer(cls):
        """The non-streamed greedy answer, asked once for the tests that compare with it."""
        if cls._answer is None:
            cls._answer = cls.client.chat.completions.create(model="small", messages=cls.QUESTION, max_tokens=96,
                                                             temperature=0)
        return cls._answer

    def test_chat_answers_the_held_out_problem(self):
        r = self.answer()
        self.assertEqual(r.object, "chat.completion")
        self.assertTrue(r.id.startswith("chatcmpl-"), f"id {r.id!r}")
        self.assertEqual(r.model, "small")
        c = r.choices[0]
        self.assertEqual(c.message.role, "assistant")
        self.assertIn("RESULT=1666", c.message.content, "the answer")
        self.assertEqual(c.finish_reason, "stop", f"the model's own end of text; content {c.message.content!r}")
        self.assertLess(r.usage.completion_tokens, 96, "completion_tokens: stopped before max_tokens")

    def test_streamed_chat_equals_non_streamed(self):
        chunks = list(self.client.chat.completions.create(model="small", messages=self.QUESTION, max_tokens=96,
                                                          temperature=0, stream=True))
        for c in chunks:
            self.assertEqual(c.object, "chat.completion.chunk", f"chunk object in {c}")
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant", "the first chunk's delta names the role")
        content = "".join(c.choices[0].delta.content or "" for c in chunks)
        self.assertEqual(content, self.answer().choices[0].message.content, "streamed content differs")
        self.assertEqual(chunks[-1].choices[0].finish_reason, "stop", "last chunk's finish_reason")

    def test_chat_logprobs(self):
        r = self.client.chat.completions.create(model="small", messages=self.QUESTION, max_tokens=16, temperature=0,
                                                logprobs=True, top_logprobs=3)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens, "logprobs.content has one entry per token")
        for i, e in enumerate(content):
            top = e.top_logprobs
            self.assertEqual(len(top), 3, f"token {i}: top_logprobs=3 gave {top}")
            self.assertIsNotNone(e.bytes, f"token {i} {e.token!r}: no bytes")
            self.assertTrue(all(t.bytes is not None for t in top), f"token {i}: an alternative without bytes: {top}")
            values = [t.logprob for t in top]
            self.assertEqual(values, sorted(values, reverse=True), f"token {i}: top_logprobs not descending")
            self.assertLessEqual(values[0], 0, f"token {i}: a logprob above 0")
            self.assertLessEqual(sum(math.exp(v) for v in values), 1 + 1e-4, f"token {i}: probabilities sum past 1")
            # Greedy: the chosen token is the most likely one.
            self.assertEqual(e.token, top[0].token, f"token {i}: greedy token is not the first alternative")
            self.assertAlmostEqual(e.logprob, top[0].logprob, delta=1e-6, msg=f"token {i}: greedy logprob")

    def test_tokenize_messages(self):
        status, chat = http("POST", self.server.base + "/tokenize", {"messages": [{"role": "user", "content": "hello"}]})
        self.assertEqual(status, 200, f"/tokenize messages: {chat}")
        self.assertEqual(len(chat.get("tokens", [])), chat.get("count"), f"/tokenize messages count: {chat}")
        _, plain = http("POST", self.server.base + "/tokenize", {"prompt": "hello"})
        self.assertGreater(chat["count"], plain["count"], "the chat template added no tokens around the message")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag in ("--server", "--worker", "--make_checkpoint", "--small_model"):
        parser.add_argument(flag, required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)
