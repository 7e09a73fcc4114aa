"""The answer cache of LLM stages: exact keys (:mod:`.keys`), entries and the workflow's
lookup/keep/settle payloads (:mod:`.models`), and the semantic decision rule and index
(:mod:`.semantic`, :mod:`.index`). Entries live in the trace store
(:mod:`armature_temporal.store.cache`); the run path is :mod:`workflows.interpreter.cache`."""
