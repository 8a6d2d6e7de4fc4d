"""Engine backends over kvpool.BatchStore (opaque keys, asynchronous batches).

One module per engine seam, each a thin shim (docs/engines/<engine>.md says how to turn it on):

- kvpool.integrations.lmcache: LMCache multi-process ``native_plugin`` L2 adapter client.
- kvpool.integrations.sglang: SGLang HiCache storage backend (``--hicache-storage-backend dynamic``).
- kvpool.integrations.vllm: vLLM secondary tier behind its CPU offloading tier.
- kvpool.integrations.kvbm: Dynamo KVBM host-memory provider (``DYN_KVBM_HOST_MEMORY_PROVIDER``).

None of them imports its engine: each takes the engine's calls and argument types (pinned in its
docs page), so it loads in the engine's process and in tests alike. While kvpoold is down every
lookup is a miss and every store a failure reported through the engine's own result type, never
an exception on the engine's thread and never a wait longer than one connect attempt.
"""
