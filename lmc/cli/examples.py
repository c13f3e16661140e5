"""One or two examples per command, shown at the end of its --help (lmc/cli/app.py `_Command`).
Every command has an entry (tests/test_help.py runs each --help and checks it); the paths are the
ones `make demo` and the README's "First hour" use."""
from __future__ import annotations

EXAMPLES: dict[str, list[str]] = {
    "validate": ["lmc validate specs/digits_mlp.yaml",
                 "lmc validate specs/resnet18.yaml --set train.batch_size=64"],
    "info": ["lmc info specs/digits_cnn.yaml",
             "lmc info specs/resnet18.yaml --params --json"],
    "render": ["lmc render specs/digits_mlp.yaml -o build/digits_mlp.mlir",
               "lmc render specs/digits_mlp.yaml --function forward --batch 1"],
    "compile": ["lmc compile specs/digits_mlp.yaml",
                "lmc compile build/digits_mlp.mlir --backend cuda --chip sm_90 -o build/digits_mlp.vmfb"],
    "train": ["lmc train specs/digits_mlp.yaml --out runs/digits_mlp",
              "lmc train specs/digits_cnn.yaml --epochs 2 --tensorboard runs/tb"],
    "eval": ["lmc eval runs/digits_mlp",
             "lmc eval specs/digits_mlp.yaml --init runs/digits_mlp/last.npz",
             "lmc eval specs/digits_mlp.yaml --init runs/digits_mlp/last.npz --limit 100 --json --dump-correct a.npy"],
    "predict": ["lmc predict runs/digits_mlp digit.png",
                "lmc predict runs/digits_cnn images/ --top-k 3 --json"],
    "export": ["lmc export runs/digits_cnn --format onnx -o digits_cnn.onnx",
               "lmc export runs/digits_cnn --format vmfb --backend llvm-cpu --batch 1 -o digits_cnn_pkg"],
    "import": ["lmc import specs/resnet18.yaml resnet18.safetensors --from torchvision -o resnet18.npz"],
    "sample": ["lmc sample specs/tiny_gpt_char.yaml --init runs/tiny_gpt_char/last.npz --prompt 'ROMEO:' --tokens 200",
               "lmc sample specs/ddpm_digits.yaml --init runs/ddpm_digits --n 64 --plot digits.png"],
    "plot": ["lmc plot runs/digits_mlp",
             "lmc plot runs/digits_mlp --plot curves.png"],
    "layers": ["lmc layers", "lmc layers --json"],
    "schema": ["lmc schema > lmc-spec.schema.json"],
    "bench": ["lmc bench specs/digits_cnn.yaml",
              "lmc bench specs/mnist_cnn.yaml --profile",
              "lmc bench specs/resnet18.yaml --batch 32 --timed-steps 20 --json"],
    "compare": ["lmc compare a.npy b.npy", "lmc compare a.npy b.npy --json"],
    "attack": ["lmc attack specs/digits_mlp.yaml --init runs/digits_mlp/last.npz --eps 0.05,0.1 --limit 200"],
    "certify": ["lmc certify specs/digits_mlp.yaml --init runs/digits_mlp/last.npz --sigma 0.25 --limit 100"],
    "lipschitz": ["lmc lipschitz specs/digits_mlp.yaml --init runs/digits_mlp/last.npz --limit 200"],
}


# `lmc --help`: the first hour, in order (the README's "First hour" section runs the same commands)
TOP_EXAMPLES = ["lmc train specs/digits_cnn.yaml --out runs/digits_cnn",
                "lmc plot runs/digits_cnn",
                "lmc eval runs/digits_cnn",
                "lmc predict runs/digits_cnn digit.png"]


def epilog(name: str | None) -> str | None:
    """The examples of command `name` (None: of `lmc` itself) as its help's closing paragraph(s), or None."""
    ex = TOP_EXAMPLES if name is None else EXAMPLES.get(name)
    if not ex:
        return None
    return "Examples:\n\n" + "\n\n".join("  " + e for e in ex)
