"""conv_direct: the same convolution as `conv`, spelled with `stablehlo.convolution` (forward,
dx as an lhs-dilated conv with the reversed kernel, dw by the transpose trick).  Opt-in with
`LMC_CONV_FORM=direct` (any backend): it hands the convolutions to IREE's own conv codegen,
which on llvm-cpu is several times slower than the matmul form (benchmarks/NOTES.md) and
for cuda took more than 15 minutes to compile resnet18's train step (the matmul form: 16 s).
Kept, oracle-tested, for GPUs where IREE's conv kernels may win at run time (unmeasured:
no GPU here)."""
from __future__ import annotations

from lmc.core.types import TensorType
from lmc.prims import primitive
from lmc.prims.conv import Conv, _unreached


def _t(*d):
    return TensorType(tuple(d))


@primitive("conv_direct")
class ConvDirect(Conv):
    # Tested (on llvm-cpu, as a proxy for the GPUs it is meant for) on conv's examples except
    # the stride-2 conv whose output is 1x1 from a 2x2 input: IREE 3.13's llvm-cpu lowering of
    # that stablehlo.convolution fails ("'linalg.generic' op inferred input/output operand #1
    # has shape's dimension #0 to be 4, but found 3"); not checked on a GPU in this session.
    examples = [e for e in Conv.examples if e[1][0].dims[2:] != (2, 2) and "layout" not in e[0]
                and "out_layout" not in e[0]]
    prefer_hbwc = False
    mixes_layouts = False

    def conv_matmuls(self, ins, ps):
        return False        # stablehlo.convolution, no patch matmuls

    def layouts(self, ins, ps):
        return ("nchw",)        # stablehlo.convolution's NCHW/OIHW dimension numbers

    def saved(self, ins, ps, out):
        return [ins[0]]

    def context(self, ins, ps, out):
        (x,), (w,) = ins, ps
        b, c, h, wd = x.dims
        o, ci, kh, kw = w.dims
        _, _, oh, ow = out.dims
        s, g = self.stride, self.groups
        ph0, ph1, pw0, pw1 = self.pad
        rh, rw = _unreached(h, kh, s, ph0, ph1), _unreached(wd, kw, s, pw0, pw1)
        ctx = {
            "s": s, "g": g,
            "pad": f"[[{ph0}, {ph1}], [{pw0}, {pw1}]]",
            # dx = conv(dy dilated by s, reversed kernel): padding k-1-lo, k-1-hi+r
            "dx_pad": f"[[{kh - 1 - ph0}, {kh - 1 - ph1 + rh}], [{kw - 1 - pw0}, {kw - 1 - pw1 + rw}]]",
            "wt": _t(c, o // g, kh, kw).mlir,
            "wg": _t(g, o // g, ci, kh, kw).mlir,
            "wgt": _t(g, ci, o // g, kh, kw).mlir,
            "xt": _t(c, b, h, wd).mlir,
            "dyt": _t(o, b, oh, ow).mlir,
            "dwt": _t(ci, o, kh, kw).mlir,
        }
        # dw: the hi padding that makes the output exactly k: hi - r; crop the input when negative
        eh, ew = ph1 - rh, pw1 - rw
        ctx["crop"] = eh < 0 or ew < 0
        ctx["xc"] = _t(c, b, h + min(eh, 0), wd + min(ew, 0)).mlir
        ctx["crop_limits"] = f"[0:{c}, 0:{b}, 0:{h + min(eh, 0)}, 0:{wd + min(ew, 0)}]"
        ctx["dw_pad"] = f"[[{ph0}, {max(eh, 0)}], [{pw0}, {max(ew, 0)}]]"
        return ctx
