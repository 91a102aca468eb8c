"""The depth study at test size (seconds, not minutes), shared by the study's and the report's
tests: a 3-dimensional atlas to 60 layers, two trained stacks of 40 steps, three noise sizes
(k = d among them)."""

TINY_DEPTH = {
    "atlas_d": 3,
    "kappas": [1.0, 30.0, 1000.0],
    "atlas_n_ctx": [2, 8],
    "eps": [1e-2, 1e-6],
    "cap": 60,
    "atlas_queries": 4,
    "train_d": 3,
    "train_layers": [1, 2],
    "train_kappas": [10.0],
    "train_n_ctx": [6],
    "steps": 40,
    "batch": 64,
    "eval_tasks": 100,
    "max_iterates": 5,
    "noise_d": 3,
    "noise_n_ctx": [1, 3, 6],
    "noise_layers": 1,
    "bayes_layers": [1],
    "noiseless_d": 3,
    "noiseless_n_ctx": [1, 3, 6],
    "noiseless_layers": 1,
    "mixed_layers": [1],
    "noise_steps": 40,
    "curve_tasks": 300,
    "mixed_n_ctx": 6,
}
