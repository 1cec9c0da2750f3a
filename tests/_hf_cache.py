"""The tests' offline Hugging Face cache: a model folder placed as if downloaded from the Hub."""
import pathlib

from timm_odevit._checks import write_atomic


def install_in_hf_cache(folder, repo_id: str, cache_dir=None, revision: str = 'main') -> pathlib.Path:
    """Place a model folder in the Hugging Face cache layout as if downloaded from ``repo_id``, so timm's real hub
    path (``hf-hub:``, registered ``hf_hub_id``) loads it with HF_HUB_OFFLINE=1."""
    from huggingface_hub.constants import HF_HUB_CACHE
    repo = pathlib.Path(cache_dir or HF_HUB_CACHE) / ('models--' + repo_id.replace('/', '--'))
    commit = '0' * 40
    snapshot = repo / 'snapshots' / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for f in pathlib.Path(folder).iterdir():
        if f.is_file():
            write_atomic(snapshot / f.name, f.read_bytes())
    (repo / 'refs').mkdir(exist_ok=True)
    write_atomic(repo / 'refs' / revision, commit)
    return snapshot
