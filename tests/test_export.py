"""odevit-export / odevit-publish state only facts of the run and of the evaluation, and refuse what would
make them untrue; the CLIs end in ``error:`` lines naming the bad argument."""
import argparse
import json
import pathlib
import re

import numpy as np
import pytest
import timm
import torch
from huggingface_hub import ModelCard
from PIL import Image

import timm_odevit  # noqa: F401
from timm_odevit import hub
from timm_odevit.models._cfgs import CIFAR10_LABELS


def _image_folder(root: pathlib.Path, split: str, classes, per_class: int = 2) -> pathlib.Path:
    rng = np.random.default_rng(0)
    for c in classes:
        (root / split / c).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(root / split / c / f'{i}.png')
    return root


@pytest.fixture(scope='module')
def eval_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp('eval')
    _image_folder(root, 'test', CIFAR10_LABELS)
    return _image_folder(root, 'train', CIFAR10_LABELS, per_class=1)


def _checkpoint(path: pathlib.Path, name: str = 'odevit_tiny_cifar', ema: bool = False, epoch: int = 0,
                summary: bool = False, **kwargs) -> pathlib.Path:
    torch.manual_seed(0)
    model_kwargs = {'steps': 2} if name.startswith('odevit') else {}
    model = timm.create_model(name, **model_kwargs)
    args = argparse.Namespace(model=name, model_kwargs=model_kwargs, epochs=3, model_ema=ema, **kwargs)
    ckpt = {'arch': name, 'args': args, 'epoch': epoch, 'version': 2, 'state_dict': model.state_dict()}
    if ema:
        ckpt['state_dict_ema'] = {k: v + 0.01 if v.is_floating_point() else v for k, v in model.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, path)
    if summary:
        (path.parent / 'summary.csv').write_text('epoch,train_loss,eval_loss,eval_top1,eval_top5,lr\n0,2.2,2.1,21.5,70,0.1\n')
    return path


def _card(folder) -> ModelCard:
    return ModelCard.load(folder / 'README.md')


def test_weights_are_those_the_run_selected_on(tmp_path, eval_dir):
    ckpt = _checkpoint(tmp_path / 'run' / 'model_best.pth.tar', ema=True)
    saved = torch.load(ckpt, weights_only=False)
    hub.export(str(ckpt), str(tmp_path / 'default'), eval_dir=str(eval_dir))
    exported = timm.create_model(f'local-dir:{tmp_path / "default"}', pretrained=True)
    torch.testing.assert_close(exported.head.weight, saved['state_dict_ema']['head.weight'])
    card = (tmp_path / 'default' / 'README.md').read_text()
    assert 'EMA weights (the weights the run validated and selected on)' in card
    hub.export(str(ckpt), str(tmp_path / 'raw'), use_ema=False, eval_dir=str(eval_dir))
    raw = timm.create_model(f'local-dir:{tmp_path / "raw"}', pretrained=True)
    torch.testing.assert_close(raw.head.weight, saved['state_dict']['head.weight'])
    assert 'raw weights (chosen at export; the run validated and selected on its EMA weights)' in \
        (tmp_path / 'raw' / 'README.md').read_text()


def test_anytime_training_depths_stay_with_the_run_not_the_exported_weights(tmp_path, eval_dir):
    ckpt = _checkpoint(tmp_path / 'run' / 'last.pth.tar')
    saved = torch.load(ckpt, weights_only=False)
    saved['args'].model_kwargs = {'steps': 2, 'train_depth': [1, 3]}
    torch.save(saved, ckpt)
    metrics = hub.export(str(ckpt), str(tmp_path / 'out'), eval_dir=str(eval_dir))
    config = json.loads((tmp_path / 'out' / 'config.json').read_text())
    assert config['model_args']['steps'] == 2 and 'train_depth' not in config['model_args']
    exported = timm.create_model(f'local-dir:{tmp_path / "out"}', pretrained=True)
    assert exported.train_depth is None and len(exported.blocks) == 2
    from timm_odevit.evaluation import evaluate_grids
    from tools.card_extras import with_depths
    metrics['grids'] = evaluate_grids(exported, str(eval_dir), grids=[1, 2])
    card = with_depths((tmp_path / 'out' / 'README.md').read_text(), exported, metrics, vars(saved['args']))
    # a release's depth table says how the weights were trained
    assert 'the last training run drew a depth from 1–3 per update (train_depth); the weights are loaded at 2' in card
    assert '| 2 (loaded) |' in card and '(trained)' not in card


def test_card_states_the_evaluated_split_dataset_images_and_1_based_epoch(tmp_path, eval_dir):
    ckpt = _checkpoint(tmp_path / 'run' / 'last.pth.tar', epoch=0)
    metrics = hub.export(str(ckpt), str(tmp_path / 'out'), eval_dir=str(eval_dir), eval_split='train')
    card = _card(tmp_path / 'out')
    result = card.data.eval_results[0]
    assert result.dataset_split == 'train' and result.dataset_type == 'cifar10' and metrics['images'] == 10
    assert result.metric_value == round(metrics['top1'], 2)
    assert '(10 train images of CIFAR-10, 10 classes' in card.text
    p = metrics['top1']  # the top-1 with its 95 % binomial interval
    assert f"| {p:.2f} ± {1.96 * (p * (100 - p) / 10) ** .5:.2f} / {metrics['top5']:.2f} |" in card.text
    assert 'last.pth.tar, epoch 1 of 3' in card.text and 'epoch 0' not in card.text


def test_dataset_must_describe_the_evaluated_classes(tmp_path, eval_dir):
    ckpt = _checkpoint(tmp_path / 'run' / 'last.pth.tar')
    with pytest.raises(ValueError, match='--dataset cifar100 does not describe .*10 classes'):
        hub.export(str(ckpt), str(tmp_path / 'out'), eval_dir=str(eval_dir), dataset='cifar100')
    assert not (tmp_path / 'out').exists()


def test_eval_folder_whose_classes_are_not_the_models_is_refused(tmp_path, eval_dir):
    ckpt = _checkpoint(tmp_path / 'run' / 'last.pth.tar')
    three = _image_folder(tmp_path / 'three', 'test', ['a', 'b', 'c'])
    with pytest.raises(ValueError, match=r'three/test has 3 classes .* the model classifies 10'):
        hub.export(str(ckpt), str(tmp_path / 'out'), eval_dir=str(three))
    flat = tmp_path / 'flat' / 'test'
    flat.mkdir(parents=True)
    Image.new('RGB', (32, 32)).save(flat / 'img.png')
    with pytest.raises(ValueError, match=r'holds images outside class folders .*img.png'):
        hub.export(str(ckpt), str(tmp_path / 'out'), eval_dir=str(tmp_path / 'flat'))
    with pytest.raises(ValueError, match=r"no split 'val'"):
        hub.export(str(ckpt), str(tmp_path / 'out'), eval_dir=str(three), eval_split='val')
    renamed = _image_folder(tmp_path / 'renamed', 'test', [f'c{i}' for i in range(10)], per_class=1)
    ckpt = _checkpoint(tmp_path / 'run3' / 'last.pth.tar', data_dir=str(renamed), train_split='test')
    hub.export(str(ckpt), str(tmp_path / 'ok'), eval_dir=str(renamed))  # the classes it was trained on
    with pytest.raises(ValueError, match=r'not those the model was trained on \(.*renamed/test'):
        hub.export(str(ckpt), str(tmp_path / 'out'), eval_dir=str(eval_dir))  # 10 classes, but other ones


def test_unreadable_image_is_named_not_replaced_by_a_neighbour(tmp_path, eval_dir):
    import shutil
    bad = tmp_path / 'bad'
    shutil.copytree(eval_dir, bad)
    (bad / 'test' / 'cat' / '1.png').write_bytes(b'\x89PNG\r\n\x1a\n truncated')
    model = timm.create_model('odevit_tiny_cifar', steps=2)
    for workers in (0, 1):
        with pytest.raises(ValueError, match=r"^cannot read image '.*cat/1.png'"):
            hub.evaluate(model, str(bad), 'test', workers=workers)


def test_weights_are_as_readable_as_the_other_files(tmp_path, eval_dir):
    hub.export(str(_checkpoint(tmp_path / 'run' / 'last.pth.tar')), str(tmp_path / 'out'), eval_dir=str(eval_dir))
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / 'out').iterdir()}
    assert modes['model.safetensors'] == modes['config.json'] == modes['README.md'], modes


def test_a_file_in_the_folders_place_is_refused_and_kept(tmp_path):
    """replaced_folder swaps folders: a file where the folder goes is named and left as it was (it was replaced, and
    a '.old' copy of it left beside)."""
    from timm_odevit._checks import replaced_folder
    mine = tmp_path / 'notes'
    mine.write_text('mine')
    with pytest.raises(NotADirectoryError, match=f'{mine} is a file, not a folder'):
        with replaced_folder(mine):
            pass
    assert mine.read_text() == 'mine' and [p.name for p in tmp_path.iterdir()] == ['notes']


def test_target_folder_is_clean_and_no_partial_folders_are_left(tmp_path, eval_dir, monkeypatch):
    out = tmp_path / 'out'
    hub.export(str(_checkpoint(tmp_path / 'run1' / 'last.pth.tar', summary=True)), str(out), eval_dir=str(eval_dir))
    assert sorted(p.name for p in out.iterdir()) == ['README.md', 'config.json', 'model.safetensors']
    from tools.card_extras import extend_card
    extend_card(out, tmp_path / 'run1', {})  # a release's extras: replaced with the folder
    assert {'summary.csv', 'learning_curve.png'} <= {p.name for p in out.iterdir()}
    hub.export(str(_checkpoint(tmp_path / 'run2' / 'last.pth.tar')), str(out), eval_dir=str(eval_dir))
    assert sorted(p.name for p in out.iterdir()) == ['README.md', 'config.json', 'model.safetensors']

    def broken(folder):
        raise ValueError('verification failed (simulated)')
    monkeypatch.setattr(hub, 'verify_folder', broken)
    with pytest.raises(ValueError, match='simulated'):
        hub.export(str(tmp_path / 'run2' / 'last.pth.tar'), str(out), eval_dir=str(eval_dir))
    assert not [p for p in tmp_path.iterdir() if '.partial-' in p.name]
    assert sorted(p.name for p in out.iterdir()) == ['README.md', 'config.json', 'model.safetensors']
    (tmp_path / 'user').mkdir()
    (tmp_path / 'user' / 'thesis.tex').write_text('mine')
    with pytest.raises(ValueError, match=r'holds files an export does not write \(\[.thesis.tex.\]'):
        hub.export(str(tmp_path / 'run2' / 'last.pth.tar'), str(tmp_path / 'user'), eval_dir=str(eval_dir))


def test_discrete_baseline_card(tmp_path, eval_dir, capsys):
    ckpt = _checkpoint(tmp_path / 'run' / 'last.pth.tar', name='vit_tiny_cifar_params_matched')
    folder = tmp_path / 'vit'
    hub.export(str(ckpt), str(folder), eval_dir=str(eval_dir))
    card = _card(folder)
    assert 'continuous-depth' not in card.text + str(card.data.tags) and 'set_iterations' not in card.text
    assert 'A discrete Vision Transformer baseline' in card.text and '4 blocks (discrete)' in card.text
    assert 'NFE' not in card.text
    for code in re.findall(r'```python\n(.*?)```', card.text, re.S):
        exec(compile(code.replace('local-dir:PATH', f'local-dir:{folder}'), 'README.md', 'exec'), {})
    assert 'torch.Size([1, 96])' in capsys.readouterr().out


def test_verify_checks_label_names_against_the_head(tmp_path, eval_dir):
    folder = tmp_path / 'out'
    hub.export(str(_checkpoint(tmp_path / 'run' / 'last.pth.tar')), str(folder), eval_dir=str(eval_dir))
    config = json.loads((folder / 'config.json').read_text())
    assert config['label_names'] == list(CIFAR10_LABELS)
    config['label_names'] = ['a', 'b', 'c']
    (folder / 'config.json').write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r'label_names must be a list of 10 distinct names.*\(3 names\)'):
        hub.verify_folder(folder)


# ---- command lines ------------------------------------------------------------------------------------------
def _cli_error(main, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert 'Traceback' not in err
    return err.strip().splitlines()[-1]


def test_export_cli_errors_name_the_argument(tmp_path, eval_dir, capsys):
    ckpt = str(_checkpoint(tmp_path / 'run' / 'last.pth.tar'))
    (tmp_path / 'file').write_text('x')
    cases = [
        ([ckpt, str(tmp_path / 'file'), '--eval-dir', str(eval_dir)], r'Not a directory: .*file'),
        ([ckpt, str(tmp_path / 'o'), '--eval-dir', str(eval_dir), '--eval-split', 'val'], r"no split 'val'"),
        ([str(tmp_path / 'run'), str(tmp_path / 'o'), '--eval-dir', str(eval_dir)], r'checkpoint .*run.* is a directory'),
        ([ckpt, str(tmp_path / 'o'), '--eval-dir', str(eval_dir), '--batch-size', '0'],
         r'batch_size should be a positive integer'),  # torch DataLoader's check
        ([ckpt, str(tmp_path / 'o'), '--eval-dir', str(eval_dir), '--device', 'gpu7'], r"--device 'gpu7'"),
        ([ckpt, str(tmp_path / 'o'), '--eval-dir', str(eval_dir), '--repo-id', 'not a//valid id'], r'--repo-id'),
    ]
    for argv, words in cases:
        assert re.search(f'odevit-export: error: .*{words}', _cli_error(hub.export_main, argv, capsys)), argv
    assert not (tmp_path / 'o').exists()


def test_export_cli_device_batch_size_and_progress(tmp_path, eval_dir, capsys):
    ckpt = str(_checkpoint(tmp_path / 'run' / 'last.pth.tar'))
    hub.export_main([ckpt, str(tmp_path / 'o'), '--eval-dir', str(eval_dir), '--device', 'cpu', '--batch-size', '7',
                     '--workers', '0'])
    out = capsys.readouterr()
    assert json.loads(out.out.strip().splitlines()[-1])['images'] == 20
    assert 'evaluating test' in out.err and '3/3' in out.err  # 20 images in batches of 7


def test_publish_cli_errors(tmp_path, eval_dir, capsys):
    folder = tmp_path / 'out'
    hub.export(str(_checkpoint(tmp_path / 'run' / 'last.pth.tar')), str(folder), eval_dir=str(eval_dir))
    err = _cli_error(hub.publish_main, [str(folder), '--repo-id', 'not a valid//repo', '--dry-run'], capsys)
    assert re.search("odevit-publish: error: --repo-id 'not a valid//repo' is not a valid Hub repo id", err)
    err = _cli_error(hub.publish_main, [str(tmp_path / 'nope'), '--repo-id', 'org/name', '--dry-run'], capsys)
    assert 'odevit-publish: error: ' in err and 'nope is not a model folder' in err


@pytest.mark.parametrize('parser', [hub.export_parser, hub.publish_parser])
def test_every_flag_has_help(parser):
    undocumented = [a.dest for a in parser()._actions if not a.help]
    assert not undocumented


def test_a_one_channel_checkpoint_is_evaluated_on_greyscale_images(tmp_path, eval_dir):
    """timm's scripts read images as L for a one-channel model; so do the evaluation and the verification."""
    ckpt = _checkpoint(tmp_path / 'run' / 'last.pth.tar', in_chans=1)
    saved = torch.load(ckpt, weights_only=False)
    model = timm.create_model('odevit_tiny_cifar', steps=2, in_chans=1)
    saved['state_dict'] = model.state_dict()
    torch.save(saved, ckpt)
    metrics = hub.export(str(ckpt), str(tmp_path / 'out'), eval_dir=str(eval_dir))
    assert metrics['images'] == 20
    loaded = timm.create_model(f'local-dir:{tmp_path / "out"}', pretrained=True)
    assert loaded.pretrained_cfg['input_size'] == (1, 32, 32)


def test_export_into_a_symlinked_folder_replaces_the_folder_it_points_to(tmp_path, eval_dir):
    target = tmp_path / 'target'
    target.mkdir()
    link = tmp_path / 'link'
    link.symlink_to(target, target_is_directory=True)
    hub.export(str(_checkpoint(tmp_path / 'run' / 'last.pth.tar')), str(link), eval_dir=str(eval_dir))
    assert link.is_symlink() and (link / 'model.safetensors').is_file() and (target / 'config.json').is_file()
    hub.export(str(_checkpoint(tmp_path / 'run' / 'last.pth.tar')), str(link), eval_dir=str(eval_dir))  # again
    assert link.is_symlink() and hub.verify_folder(link) is None


def test_evaluate_grids_accepts_numpy_grids(eval_dir):
    from timm_odevit.evaluation import evaluate_grids
    rows = evaluate_grids(timm.create_model('odevit_tiny_cifar', steps=2), str(eval_dir), grids=np.array([1, 2]))
    assert [g['depth'] for g in rows] == [1, 2]
