"""Trust tools for trained nets (docs/trust.md): paired comparison (`lmc compare`), PGD attacks
(`lmc attack`), randomized-smoothing certificates (`lmc certify`), the Lipschitz certificate
(`lmc lipschitz`) and the recipe knobs that train for them (spectral cap, Gaussian noise, fp8).
Each command stands on the compiled module lmc already builds (`@forward`, and `@input_grad`
for the attack); the statistics are scipy's, never hand-written tails."""
