"""The README's "Use kiln from ..." examples, as the packaging tests compile and run them, and what
they must print."""

import re
import subprocess
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def example(language, fence):
    """The first ```fence block under the README heading "Use kiln from <language>"."""
    readme = (REPO / "README.md").read_text()
    section = re.search(rf"^## Use kiln from {re.escape(language)}(?![\w+])[^\n]*\n(.*?)(?=^## )", readme,
                        re.M | re.S)
    assert section, f"README has no section 'Use kiln from {language}'"
    block = re.search(rf"```{fence}\n(.*?)```", section.group(1), re.S)
    assert block, f"README's {language} section has no ```{fence} block"
    return block.group(1)


def first_logit_at_one_half(kiln, folder):
    """The demo model's first output element for an input of 0.5 everywhere, by `kiln run`."""
    np.save(folder / "half.npy", np.full((1, 3, 64, 64), 0.5, np.float32))
    subprocess.run([kiln, "run", str(REPO / "models" / "demo.onnx"), "--input", f"input={folder / 'half.npy'}",
                    "--output-dir", str(folder / "out")], check=True, capture_output=True, timeout=300)
    return np.load(folder / "out" / "logits.npy").reshape(-1)[0]


def printed_logit(output):
    """The value of the example's `logits[0]: V` line, as float32."""
    match = re.search(r"^logits\[0\]: (\S+)$", output, re.M)
    assert match, output
    return np.float32(float(match.group(1)))
