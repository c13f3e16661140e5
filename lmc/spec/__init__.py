"""Stage 1, load: YAML source (with positions) → NetSpec (layers) + TrainConfig (recipe)."""
