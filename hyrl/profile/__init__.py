"""`hyrl profile-rollout`: decode throughput and latency of a rollout engine against concurrency,
to find where throughput plateaus (step 4 of the batch-size procedure). Study tooling beside
`hyrl.plan`: it uses the runtime's engines (`hyrl.rollout`), and nothing of the runtime imports it.

One concern per module: `flags` (every flag checked before a model is built; standard library
only), `measure` (the timed passes, the rows and the plateau), `report` (the reading in words,
profile.json, profile.md, profile.png, the table and the progress bar), `cli` (the command and
the engines it measures). Nothing is imported here, so `hyrl profile-rollout` rejects a bad flag
before torch is imported.
"""
