"""`--rollout-engine sglang`: an SGLang server (launched or existing) driven over its HTTP API."""
