"""Parameters of timm ViTs before and after odeify (one shared block), measured on the meta device.

    python bench/odeify_params.py
"""
import timm
import torch

from timm_odevit import odeify
from _util import write_result

MODELS = ['vit_tiny_patch16_224', 'vit_small_patch16_224', 'vit_base_patch16_224', 'deit_small_distilled_patch16_224',
          'vit_base_patch16_reg4_gap_256', 'vit_large_patch16_224']


def main():
    rows = []
    print('| model | blocks | params before (M) | odeify state_subtracted (M) | odeify odevit field (M) |')
    print('|---|---|---|---|---|')
    for name in MODELS:
        with torch.device('meta'):
            vit = timm.create_model(name)
            counts = [sum(p.numel() for p in m.parameters()) / 1e6
                      for m in (vit, odeify(vit, init='block:0'), odeify(vit, field='odevit', init='random'))]
        rows.append({'model': name, 'blocks': len(vit.blocks), 'params_M': counts[0],
                     'state_subtracted_M': counts[1], 'odevit_field_M': counts[2]})
        print(f'| {name} | {len(vit.blocks)} | {counts[0]:.2f} | {counts[1]:.2f} | {counts[2]:.2f} |')
    print(f'wrote {write_result("odeify_params", {"benchmark": "odeify_params", "rows": rows})}')


if __name__ == '__main__':
    main()
