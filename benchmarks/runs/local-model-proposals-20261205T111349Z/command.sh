# Made 2026-12-05 on the 2-vCPU VM (main at 6a2d6d3).
# SmolLM2-135M-Instruct Q4_1 behind llama.cpp (xllamacpp), two servers with a 4,096-token
# window and one thread each, one per core, so the two formats ran side by side:
scripts/local-model.sh start --ctx 4096                         # 127.0.0.1:8089
scripts/local-model.sh serve --ctx 4096 --port 8090 &
# harness.sample-*.toml = harness.toml + [agents.local] base_url, max_tokens = 384,
# repair_rounds = 0: first-round replies only, so that 40 proposals take minutes.
ratchet --config harness.sample-json.toml propose --agent local --count 20 --reply-format json --out benchmarks/records/local-model-proposals-20261205T111349Z/json.json
ratchet --config harness.sample-text.toml propose --agent local --count 20 --reply-format text --out benchmarks/records/local-model-proposals-20261205T111349Z/text.json
