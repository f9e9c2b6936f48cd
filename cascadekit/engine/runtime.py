"""Where a model runs and how it is loaded, wrapped and saved: one place for every trainer and the sampler.

- :func:`choose_device` picks the device and dtype, and says why: the profile's
  ``device``/``dtype`` when it names them (falling back to the CPU, with a reason,
  when it asks for CUDA on a machine without it), else CUDA in bf16 (fp16 where
  the GPU lacks bf16), else the CPU in fp32.
- :func:`load_model` and :func:`load_tokenizer` take a local checkpoint folder or
  a Hugging Face Hub name (``Qwen/Qwen3-0.6B-Base``). A folder never touches the
  network. A hub name is loaded from the local HF cache when it is there;
  otherwise it is downloaded only when allowed (``allow_download=True``, or
  ``CASCADEKIT_ALLOW_DOWNLOAD=1``), with one line naming the model and the cache
  folder; when not allowed, :class:`DownloadNotAllowed` says what is missing and
  how to allow it. A folder that cannot be loaded (no weights, pickled weights
  that are not plain tensors, a config that asks to run its own code, which is
  never trusted) is one :class:`CheckpointUnloadable` line. Nothing at the smoke or toy scale downloads anything: their
  models are built from scratch (:func:`cascadekit.engine.models.build_model`) and their
  checkpoints are local folders.
- :func:`with_lora` wraps a model with LoRA (PEFT), :func:`lora_config` is the
  kit's adapter (every linear layer), and :func:`save_checkpoint` writes a model
  and its tokenizer to a temporary folder beside the destination and renames it
  into place, so a checkpoint cut mid-save never sits under the real name.
  Under ``torchrun`` every process calls it: DeepSpeed ZeRO-3 shards are gathered
  first (FSDP 2 shards into a full state dict on the main process), the main process
  alone writes, and all wait for it (:mod:`cascadekit.distributed`).
- :func:`base_model_source` is the profile's ``model.pretrained``: the released
  weights a GPU profile starts from (empty at the CPU scales, which build from scratch).
  :func:`load_chat_tokenizer` is that model's own tokenizer with the kit's chat
  markers and ``/think`` ``/no_think`` template. ``load_model(quantization="4bit")``
  loads the frozen base in NF4 through bitsandbytes (QLoRA, a GPU only);
  :mod:`cascadekit.engine.trainable` turns a loaded model into what a stage trains.
"""
from __future__ import annotations

import contextlib
import copy
import json
import os
import pickle
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

import torch
from packaging.version import Version
from huggingface_hub import constants as hub_constants
from huggingface_hub import snapshot_download
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import (
    AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase,
)
from transformers.integrations import is_deepspeed_zero3_enabled

from cascadekit import distributed
from cascadekit.chat import MARKUP_TOKENS, install_chat_template
from cascadekit.profiles import Profile

__all__ = [
    "BF16_CAPABILITY", "CPU", "CPU_TRL", "DOWNLOAD_ENV", "CheckpointUnloadable", "DownloadNotAllowed", "MissingExtra", "NoSuchCheckpoint",
    "Placement",
    "UnsupportedStack", "base_model_source", "checkpoint_folder", "choose_device", "cpu_trl_problem", "cuda_device",
    "download_allowed", "four_bit_config", "hub_cache_dir", "load_chat_tokenizer",
    "load_classifier", "load_model", "load_tokenizer", "lora_config", "refuse_cpu_trl", "require", "save_checkpoint", "with_lora",
]

#: Set to ``1`` to let :func:`load_model` and :func:`load_tokenizer` download a hub model that is not cached.
DOWNLOAD_ENV = "CASCADEKIT_ALLOW_DOWNLOAD"
_TRUE = ("1", "true", "yes", "on")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
#: Files a causal-LM checkpoint needs (weights, config, tokenizer, chat template), for hub snapshots.
_CHECKPOINT_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken"]


# ---------------------------------------------------------------------------
# Device and dtype
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Where a model runs (``device``: ``cpu`` or ``cuda``), its compute precision (``dtype``) and why.

    ``dtype`` is ``float32``, ``bfloat16`` or ``float16``. The weights are held in
    :attr:`weights_dtype`: bf16 on a GPU with bf16, float32 everywhere else (fp16 and
    CPU bf16 train with float32 master weights under autocast).
    """

    device: str
    dtype: str
    reason: str

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"unknown device {self.device!r}; choose 'cpu' or 'cuda'")
        if self.dtype not in _DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose one of {sorted(_DTYPES)}")

    @property
    def on_gpu(self) -> bool:
        return self.device == "cuda"

    @property
    def torch_dtype(self) -> torch.dtype:
        """The compute precision as a torch dtype."""
        return _DTYPES[self.dtype]

    @property
    def weights_dtype(self) -> torch.dtype:
        """The dtype :func:`load_model` holds the weights in (a float32 checkpoint on the CPU stays float32)."""
        return torch.bfloat16 if self.on_gpu and self.dtype == "bfloat16" else torch.float32

    def trainer_arguments(self) -> dict[str, bool]:
        """``use_cpu``, ``bf16`` and ``fp16`` for ``TrainingArguments`` (and TRL's configs built on it)."""
        return {"use_cpu": not self.on_gpu, "bf16": self.dtype == "bfloat16", "fp16": self.dtype == "float16"}

    def __str__(self) -> str:
        return f"{self.device} ({self.dtype}): {self.reason}"


#: The placement :func:`load_model` uses when given none: the CPU in float32, as the toy scale trains.
CPU = Placement("cpu", "float32", "the CPU in float32, the kit's default for loading a checkpoint")
_CPU_REASON = "no CUDA device; fp32 is the safe and, for small models, the fast choice on CPU"


#: The first CUDA compute capability that computes bf16 in hardware (Ampere, sm_80): vLLM refuses bf16 below it.
BF16_CAPABILITY = (8, 0)


def cuda_device() -> tuple[str, bool] | None:
    """``(name, supports bf16)`` of the first CUDA device, or None without one (tests replace this).

    bf16 is decided by the compute capability (:data:`BF16_CAPABILITY`), not by
    ``torch.cuda.is_bf16_supported()``, which says True on a T4 (7.5) because torch
    emulates bf16 there: vLLM then refuses ``dtype="bfloat16"`` on that card and
    Unsloth switches the model to fp16 while the trainer is told bf16. So a
    pre-Ampere card runs every engine in fp16.
    """
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(0), tuple(torch.cuda.get_device_capability(0)) >= BF16_CAPABILITY


def choose_device(profile: Any = None) -> Placement:
    """The device and dtype to run on, with the reason.

    Without a profile (or one that names no device): CUDA with bf16 when the GPU
    supports it, fp16 when it does not, else the CPU in float32. A profile's
    ``device`` and ``dtype`` win over that automatic choice; a profile that asks
    for CUDA on a machine without it runs on the CPU in float32 (the reason says so),
    and one that asks for bf16 on a GPU without it gets fp16.
    """
    gpu = cuda_device()
    device = getattr(profile, "device", None) if profile is not None else None
    dtype = getattr(profile, "dtype", None) if profile is not None else None
    name = f"profile {getattr(profile, 'name', '?')!r}"
    if device is None:
        if gpu is None:
            return Placement("cpu", "float32", _CPU_REASON)
        gpu_name, bf16 = gpu
        if bf16:
            return Placement("cuda", "bfloat16", f"{gpu_name} supports bf16")
        return Placement("cuda", "float16", f"{gpu_name} lacks bf16")
    if device == "cpu":
        return Placement("cpu", dtype or "float32", f"{name} asks for the CPU in {dtype or 'float32'}")
    if device != "cuda":
        raise ValueError(f"{name} asks for device {device!r}; choose 'cpu' or 'cuda'")
    if gpu is None:
        return Placement("cpu", "float32", f"{name} asks for cuda but no CUDA device is visible: the CPU in float32")
    gpu_name, bf16 = gpu
    dtype = dtype or ("bfloat16" if bf16 else "float16")
    if dtype == "bfloat16" and not bf16:
        return Placement("cuda", "float16", f"{name} asks for bf16 but {gpu_name} lacks it: fp16")
    return Placement("cuda", dtype, f"{name} asks for cuda in {dtype} ({gpu_name})")


#: The first TRL whose SFT and GRPO train on a CPU. TRL 1.15 (what the ``[unsloth]`` extra resolves to) computes
#: every log-probability with its fused LM head, a Triton kernel; without it (``trl.trainer.utils``) the kernel is
#: None and the first step dies with ``'NoneType' object has no attribute 'apply'`` (measured with transformers 5.17).
CPU_TRL = "1.16"


class UnsupportedStack(ValueError):
    """An installed library version that cannot run what was asked on this device, in one line (the CLI prints it)."""


def cpu_trl_problem(trl_version: str, on_gpu: bool) -> str | None:
    """Why TRL ``trl_version`` cannot train SFT or GRPO here, or None when it can (any TRL on a GPU, 1.16+ anywhere)."""
    if on_gpu or Version(trl_version) >= Version(CPU_TRL):
        return None
    return (f"trl {trl_version} (the [unsloth] extra's stack) cannot train SFT or GRPO on a CPU: its fused LM head "
            f"is a Triton kernel ('NoneType' object has no attribute 'apply' at the first step); "
            f"on a CPU install trl>={CPU_TRL} (pip install 'trl>={CPU_TRL},<1.17')")


def refuse_cpu_trl(placement: Placement, trainer: str) -> None:
    """:class:`UnsupportedStack` when the imported TRL cannot run ``trainer`` on ``placement`` (:func:`cpu_trl_problem`).

    Called where a trainer's arguments are built, so it refuses before any model loads.
    """
    import trl

    if problem := cpu_trl_problem(trl.__version__, placement.on_gpu):
        raise UnsupportedStack(f"{trainer}: {problem}")


# ---------------------------------------------------------------------------
# Loading by path or hub name
# ---------------------------------------------------------------------------


class DownloadNotAllowed(RuntimeError):
    """A hub model that is neither a local folder nor cached, with downloading off."""


def hub_cache_dir() -> str:
    """The Hugging Face cache folder hub models are loaded from and downloaded into."""
    return hub_constants.HF_HUB_CACHE


def download_allowed(profile: Any = None, allow: bool | None = None) -> bool:
    """Whether a hub model that is not cached may be downloaded.

    ``allow`` wins when given; else ``CASCADEKIT_ALLOW_DOWNLOAD=1`` allows it; else the
    profile's ``engine.allow_download`` (False when the profile has no such field).
    """
    if allow is not None:
        return bool(allow)
    if os.environ.get(DOWNLOAD_ENV, "").strip().lower() in _TRUE:
        return True
    return bool(getattr(getattr(profile, "engine", None), "allow_download", False))


class MissingExtra(ImportError):
    """A GPU-only package that is not installed, with the extra that installs it."""


def require(module: str, extra: str, why: str) -> Any:
    """``import module``, or :class:`MissingExtra` saying ``why`` it is needed and ``pip install 'cascadekit[extra]'``.

    GPU packages (bitsandbytes, vLLM, DeepSpeed, Unsloth) are imported only here,
    when a path needs them, so the CPU install never imports or requires them.
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtra(f"{why} needs the {module!r} package, which is not installed: "
                           f"pip install 'cascadekit[{extra}]' ({err})") from err


def _hub_offline() -> bool:
    return bool(hub_constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def _local_folder(source: str | os.PathLike) -> Path | None:
    """``source`` as a local folder, None for a hub name; FileNotFoundError for a path that does not exist."""
    text = os.fspath(source)
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    looks_like_path = (isinstance(source, os.PathLike) or os.path.isabs(text) or text.startswith((".", "~"))
                       or "\\" in text or not text or "" in text.split("/"))
    if looks_like_path or path.exists():
        raise FileNotFoundError(f"no checkpoint folder at {path}")
    return None


def _not_allowed(what: str, name: str) -> DownloadNotAllowed:
    return DownloadNotAllowed(
        f"{what} {name!r} is not a local folder and not in the Hugging Face cache ({hub_cache_dir()}), and "
        f"downloading is off; allow it with {DOWNLOAD_ENV}=1 (or allow_download=True, or the profile's "
        f"model.allow_download), or pass a local checkpoint folder"
    )


T = TypeVar("T")


class CheckpointUnloadable(OSError):
    """A checkpoint folder the loader refused or failed on, in one line naming the folder."""


def _loaded(what: str, folder: str | os.PathLike, load: Callable[..., T], **kwargs: Any) -> T:
    """``load(folder, **kwargs)``; any failure of the loader on the folder's files is a :class:`CheckpointUnloadable`.

    A released or model-written folder is hostile input: transformers and torch
    answer a bad one with many lines (a pickle refused by ``weights_only``, a
    missing tokenizer file, a config asking for remote code), which the command
    line must turn into one. The first line of the loader's message is kept, and
    the original error is chained for a reader who wants all of it.
    """
    try:
        return load(str(folder), **kwargs)
    except Exception as err:  # noqa: BLE001 - whatever the files make the loader raise
        if isinstance(err, pickle.UnpicklingError):
            reason = "its weights are a pickle that is not plain tensors (refused: loading it could run code)"
        else:
            reason = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise CheckpointUnloadable(f"{what} at {folder} cannot be loaded: {reason}") from err


class NoSuchCheckpoint(DownloadNotAllowed, FileNotFoundError):
    """A name shaped both as a relative folder and as a hub repository's subfolder that is neither (nor cached)."""


def _hub_parts(name: str) -> tuple[str, str]:
    """``(repository, subfolder)`` of a hub name: ``owner/repo`` has none; ``owner/repo/stage`` names one of the
    repository's folders, as the Cascade-1 intermediate checkpoints are (``nvidia/...-Intermediate-ckpts/<stage>``)."""
    parts = name.split("/")
    return "/".join(parts[:2]), "/".join(parts[2:])


def _snapshot(name: str, local_files_only: bool) -> Path:
    """The folder of hub model ``name`` in the HF cache (downloaded first unless ``local_files_only``).

    A name with a subfolder (:func:`_hub_parts`) fetches that folder's files alone and is that folder.
    """
    repo, subfolder = _hub_parts(name)
    patterns = [f"{subfolder}/{pattern}" if subfolder else pattern for pattern in _CHECKPOINT_FILES]
    try:
        root = Path(snapshot_download(repo, allow_patterns=patterns, local_files_only=local_files_only))
    except ValueError as err:  # not a valid repo id
        raise OSError(str(err)) from err
    folder = root / subfolder
    if not folder.is_dir():
        raise FileNotFoundError(f"hub repository {repo} has no folder {subfolder!r}")
    return folder


def _from_source(what: str, source: str | os.PathLike, load: Callable[..., T], allow_download: bool | None,
                 **kwargs: Any) -> T:
    """``load(folder, **kwargs)`` for a local folder, a hub model's cached snapshot, or (when allowed) a download.

    A hub name is resolved to its snapshot folder in the cache first, so the
    loader only ever sees a local folder: transformers' own hub look-ups reach for
    the network even with ``local_files_only`` (the adapter check, the user agent).
    """
    folder = _local_folder(source)
    if folder is not None:  # a folder never touches the network
        return _loaded(what, folder, load, **kwargs)
    name = os.fspath(source)
    try:
        return _loaded(what, _snapshot(name, local_files_only=True), load, **kwargs)
    except OSError as cached:  # not in the cache, or only partly
        if not download_allowed(allow=allow_download):
            if _hub_parts(name)[1]:  # owner/repo/folder reads as a relative folder too
                raise NoSuchCheckpoint(f"no checkpoint folder at {Path(name).expanduser()}, and {_not_allowed(what, name)}"
                                       ) from cached
            raise _not_allowed(what, name) from cached
        if _hub_offline():
            raise DownloadNotAllowed(f"{what} {name!r} is not in the Hugging Face cache ({hub_cache_dir()}) "
                                     f"and HF_HUB_OFFLINE is set, so it cannot be downloaded") from cached
    print(f"cascadekit: downloading {what} {name} from the Hugging Face Hub into {hub_cache_dir()}",
          file=sys.stderr, flush=True)
    return _loaded(what, _snapshot(name, local_files_only=False), load, **kwargs)


QUANTIZATIONS = ("none", "4bit")


def four_bit_config(placement: Placement) -> Any:
    """bitsandbytes NF4 with double quantization, computing in the placement's dtype (the QLoRA recipe)."""
    require("bitsandbytes", "gpu", "4-bit loading (QLoRA)")
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=placement.torch_dtype)


def _placed(placement: Placement, quantization: str) -> dict[str, Any]:
    """``from_pretrained``'s dtype, quantization and device for ``placement``: on a GPU, this process's own one."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"unknown quantization {quantization!r}; choose one of {', '.join(QUANTIZATIONS)}")
    kwargs: dict[str, Any] = {"dtype": placement.weights_dtype, "trust_remote_code": False}  # never ask, never run
    if quantization == "4bit":
        if not placement.on_gpu:
            raise ValueError(f"4-bit loading needs a CUDA GPU (bitsandbytes); the placement is {placement}")
        kwargs["quantization_config"] = four_bit_config(placement)
    if placement.on_gpu and not is_deepspeed_zero3_enabled():  # ZeRO-3 shards the weights itself
        kwargs["device_map"] = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    return kwargs


def load_model(source: str | os.PathLike, placement: Placement | None = None, *,
               allow_download: bool | None = None, quantization: str = "none") -> PreTrainedModel:
    """A causal LM from a checkpoint folder or a hub name, on ``placement``'s device in its :attr:`~Placement.weights_dtype`.

    ``placement`` defaults to :data:`CPU` (float32 on the CPU, what the toy scale
    trains in); pass ``choose_device(profile)`` to follow a profile. A folder holding
    a LoRA adapter (``adapter_config.json``) loads its base model with the adapter.
    ``allow_download`` None follows ``CASCADEKIT_ALLOW_DOWNLOAD`` (see :func:`download_allowed`).
    ``quantization="4bit"`` holds the weights in NF4 (:func:`four_bit_config`): a
    CUDA placement and bitsandbytes (the ``gpu`` extra) only, each refused clearly.
    """
    kwargs = _placed(placement or CPU, quantization)
    return _from_source("model", source, AutoModelForCausalLM.from_pretrained, allow_download, **kwargs)


def load_classifier(source: str | os.PathLike, placement: Placement | None = None, *, labels: int | None = None,
                    layers: int | None = None, quantization: str = "none", seed: int | None = None) -> PreTrainedModel:
    """A sequence classifier from a local checkpoint folder, placed as :func:`load_model` places a causal LM.

    ``labels`` outputs on a fresh head (1: a reward model's scalar, 2: a yes/no
    judge; None keeps a saved classifier's own), the first ``layers`` decoder layers
    when given (a reward model cut from a policy), in NF4 with ``quantization="4bit"``.
    ``seed`` draws the fresh head (:func:`drawn_from`); None draws it from the process's
    random state as it stands, which depends on what ran before: whether an upstream stage
    was built (and sampled) or read from the cache.
    """
    config: dict[str, Any] = {} if labels is None else {"num_labels": labels}
    if layers is not None:
        saved = json.loads((Path(source) / "config.json").read_text())
        if not 1 <= layers <= saved["num_hidden_layers"]:
            raise ValueError(f"a classifier keeps 1 to {saved['num_hidden_layers']} layers of {source}, not {layers}")
        config["num_hidden_layers"] = layers
        if "layer_types" in saved:
            config["layer_types"] = saved["layer_types"][:layers]
    kwargs = {**_placed(placement or CPU, quantization), **config}
    with drawn_from(seed):
        return _loaded("classifier", source, AutoModelForSequenceClassification.from_pretrained, **kwargs)


@contextlib.contextmanager
def drawn_from(seed: int | None):
    """Random draws inside come from ``seed`` and leave the process's random state as it was (None: no change).

    Why: the HF Trainer seeds itself when it is made, after the model it trains was
    loaded, so a fresh head drawn at load time took whatever state the process was in.
    Measured (second world, SWE judge at four epochs, training seeds 0 and 1, same key):
    a judge built where its policy samples were cached and one built where they were
    sampled first had the same examples, other heads, held-out AUC 0.749 / 0.739 and
    0.683 / 0.703, and SWE RL's own-domain lift on seed 1 +0.042 / -0.008.
    """
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def load_tokenizer(source: str | os.PathLike, *, allow_download: bool | None = None) -> PreTrainedTokenizerBase:
    """The tokenizer of a checkpoint folder (saved with ``save_pretrained``) or of a hub model."""
    return _from_source("tokenizer", source, AutoTokenizer.from_pretrained, allow_download, trust_remote_code=False)


def load_chat_tokenizer(source: str | os.PathLike, *, allow_download: bool | None = None) -> PreTrainedTokenizerBase:
    """A released model's own tokenizer, made the kit's: chat markers as special tokens, the /think template.

    The tokenizer of ``source`` (folder or hub name, under the download rule of
    :func:`load_tokenizer`) keeps its vocabulary; each of the kit's chat markers it
    lacks (:data:`cascadekit.chat.MARKUP_TOKENS`) is added as a special token (a
    Qwen3 tokenizer has them all, so its ids stay the model's), and the kit's chat
    template replaces the model's own, so ``apply_chat_template`` renders exactly
    what :func:`cascadekit.chat.render` does. A tokenizer without a pad token pads
    with its end-of-text token.
    """
    tokenizer = load_tokenizer(source, allow_download=allow_download)
    vocab = tokenizer.get_vocab()
    missing = [t for t in MARKUP_TOKENS if t not in vocab]
    if missing:
        tokenizer.add_tokens(missing, special_tokens=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return install_chat_template(tokenizer)


def checkpoint_folder(source: str | os.PathLike, *, allow_download: bool | None = None) -> Path:
    """A local folder holding ``source``: the folder itself, or a hub model's snapshot in the HF cache.

    For engines that load a checkpoint themselves (vLLM): a hub name is resolved
    here, under the same download rule as :func:`load_model`.
    """
    return _from_source("checkpoint", source, Path, allow_download)


def base_model_source(profile: Any) -> str | None:
    """The released weights the profile starts from (``model.pretrained``), or None to build from scratch."""
    return getattr(getattr(profile, "model", None), "pretrained", "") or None


# ---------------------------------------------------------------------------
# LoRA and saving
# ---------------------------------------------------------------------------


def lora_config(rank: int = 16, alpha: int = 32, target_modules: str | list[str] = "all-linear",
                dropout: float = 0.0) -> LoraConfig:
    """The kit's LoRA adapter: every linear layer by default, no dropout, for a causal LM.

    With LoRA and a KL penalty, TRL's reference model is the base model with the
    adapter switched off, so no second copy of the weights is held.
    """
    return LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules,
                      task_type="CAUSAL_LM")


def with_lora(model: PreTrainedModel, rank: int = 16, alpha: int = 32,
              target_modules: str | list[str] = "all-linear", dropout: float = 0.0) -> PeftModel:
    """``model`` wrapped with a fresh LoRA adapter (:func:`lora_config`); only the adapter trains."""
    return get_peft_model(model, lora_config(rank, alpha, target_modules, dropout))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _is_4bit(model: PreTrainedModel) -> bool:
    return bool(getattr(model, "is_loaded_in_4bit", False) or getattr(model.base_model, "is_loaded_in_4bit", False))


def _merged_on_full_weights(model: PeftModel) -> PreTrainedModel:
    """A QLoRA model's adapter merged into its base reloaded unquantized (bf16), not into the NF4 weights.

    Merging into the 4-bit weights would round the merged weights to NF4; the
    QLoRA recipe merges into the full-precision base the adapter was trained on.
    The base is reloaded as the class and config it was trained as, less the
    quantization: a causal LM, or a classifier with its kept layers and labels
    (whose head the adapter carries whole, PEFT's ``modules_to_save``).
    """
    base = model.get_base_model()
    config = copy.deepcopy(base.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    base_source = model.peft_config[model.active_adapter].base_model_name_or_path
    with tempfile.TemporaryDirectory(prefix="cascadekit-adapter-") as adapter:
        model.save_pretrained(adapter)
        full = _from_source("model", base_source, type(base).from_pretrained, None, config=config,
                            dtype=torch.bfloat16, trust_remote_code=False)
        return PeftModel.from_pretrained(full, adapter).merge_and_unload()


def _partitioned(model: PreTrainedModel) -> bool:
    """Whether DeepSpeed ZeRO-3 holds ``model``'s weights in shards across the processes (each has a slice)."""
    return any(hasattr(p, "ds_id") for p in model.parameters())


def _whole_weights(model: PreTrainedModel) -> contextlib.AbstractContextManager[Any]:
    """A context in which every process holds ``model``'s full weights: gathered from ZeRO-3's shards, else as is.

    Every process must enter it (the gather is a collective); only the main process
    then writes. ``save_pretrained`` on a still-partitioned model would write each
    process's empty placeholders.
    """
    if not _partitioned(model):
        return contextlib.nullcontext()
    deepspeed = require("deepspeed", "gpu", "saving a ZeRO-3 partitioned model")
    return deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None)


def _fsdp_sharded(model: PreTrainedModel) -> bool:
    """Whether FSDP 2 (``fully_shard``, what accelerate's FSDP gives) holds ``model``'s weights as DTensor shards."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return False  # no process group, no shards (and no import of DTensor for a one-process save)
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())


def _full_state_dict(model: PreTrainedModel) -> dict[str, torch.Tensor] | None:
    """An FSDP 2 model's whole weights, gathered onto the main process's CPU (empty on the others); else None.

    Every process must call it (the gather is a collective). ``save_pretrained`` on
    the sharded model itself gathers each DTensor as it writes, a collective the
    other processes never join: the main process would hang there.
    """
    if not _fsdp_sharded(model):
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _merged(model: PreTrainedModel) -> PreTrainedModel:
    """A LoRA model with its adapter merged into a copy of the weights (the full base for QLoRA); others as they are."""
    if not isinstance(model, PeftModel):
        return model
    return _merged_on_full_weights(model) if _is_4bit(model) else copy.deepcopy(model).merge_and_unload()


def save_checkpoint(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase | None, dest: str | os.PathLike, *,
                    merge_lora: bool = False, files: Mapping[str, str | bytes] | None = None) -> Path:
    """Save ``model`` (and ``tokenizer``, and extra ``files`` by name) as the checkpoint folder ``dest``.

    Everything is written to a temporary folder beside ``dest`` and renamed into
    place; an existing ``dest`` is replaced as a whole. A LoRA (PEFT) model saves
    its adapter, or with ``merge_lora`` a copy with the adapter merged into the
    weights (a plain checkpoint any engine loads; the copy costs the model's memory
    once more). Returns ``dest``.

    Under a multi-process launch every process must call it: a ZeRO-3 model's
    shards are gathered on all of them (:func:`_whole_weights`), an FSDP 2 model's
    into one full state dict on the main process only (:func:`_full_state_dict`),
    only the main process writes, and all wait for it to finish. Merging an adapter
    into a ZeRO-3 or FSDP model is refused (it would copy the gathered model once
    more); the kit's sharded profile (``full``) trains without LoRA.
    """
    dest = Path(dest)
    for name in files or {}:  # refused before any process waits for the main one to write
        if (dest / name).parent != dest:
            raise ValueError(f"extra checkpoint file {name!r} must be a plain file name")
    if merge_lora and isinstance(model, PeftModel) and _partitioned(model):
        raise ValueError("merging a LoRA adapter into a ZeRO-3 partitioned model is not supported: save the "
                         "adapter (merge_lora=False) or train without ZeRO-3")
    if merge_lora and isinstance(model, PeftModel) and _fsdp_sharded(model):
        raise ValueError("merging a LoRA adapter into an FSDP sharded model is not supported: save the "
                         "adapter (merge_lora=False) or train without FSDP")
    state = _full_state_dict(model)  # FSDP 2: gathered by every process onto the main one
    with _whole_weights(model):
        if distributed.is_main():  # the gather is every process's part; writing is the main process's
            model = _merged(model) if merge_lora else model
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.saving-", dir=dest.parent))
            try:
                model.save_pretrained(tmp, **({} if state is None else {"state_dict": state}))
                if tokenizer is not None:
                    tokenizer.save_pretrained(tmp)
                for name, data in (files or {}).items():
                    target = tmp / name
                    if isinstance(data, bytes):
                        target.write_bytes(data)
                    else:
                        target.write_text(data)
                _put_in_place(tmp, dest)
            except BaseException:
                with contextlib.suppress(OSError):
                    _remove(tmp)
                raise
    distributed.barrier()
    return dest


def _put_in_place(tmp: Path, dest: Path) -> None:
    """Rename the finished folder ``tmp`` to ``dest``, replacing an existing ``dest`` as a whole."""
    os.chmod(tmp, 0o755)
    if dest.exists() or dest.is_symlink():
        aside = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
        os.replace(dest, aside / "old")
        os.replace(tmp, dest)
        _remove(aside)
    else:
        os.replace(tmp, dest)


def training_precision(profile: Profile) -> dict[str, bool]:
    """``use_cpu``, ``bf16`` and ``fp16`` for a Trainer: the device's, plus bf16 autocast on the CPU when asked.

    The device and dtype come from :func:`choose_device`. On the
    CPU, transformers' ``bf16=True`` with ``use_cpu=True`` runs each forward and
    backward pass under ``torch.autocast("cpu", dtype=torch.bfloat16)`` and keeps
    the weights, gradients and optimizer state in float32.
    """
    arguments = choose_device(profile).trainer_arguments()
    if arguments["use_cpu"] and profile.engine.precision == "bf16-autocast":
        arguments.update(bf16=True, fp16=False)
        if not _native_cpu_bf16():
            warnings.warn("engine.precision=bf16-autocast on a CPU without native bf16 (no AVX512-BF16 or AMX): "
                          "bf16 is emulated here and trains several times slower than fp32", stacklevel=2)
    return arguments


def _native_cpu_bf16() -> bool:
    """Whether this CPU computes bf16 natively (oneDNN's own check); True when torch cannot tell."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return True
