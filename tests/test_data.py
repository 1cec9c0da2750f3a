"""timm_odevit.data.open_rgb: image files as 8-bit RGB, faithfully, or a ValueError naming the file."""
import pytest

from timm_odevit.data import open_rgb


def test_16_bit_greyscale_is_scaled_not_saturated(tmp_path):
    import numpy as np
    from PIL import Image
    grey = np.full((4, 4), 32768, np.uint16)  # mid grey in 16 bits
    Image.fromarray(grey).save(tmp_path / 'g16.png')
    assert Image.open(tmp_path / 'g16.png').convert('RGB').getpixel((0, 0)) == (255, 255, 255)  # Pillow's own: white
    assert open_rgb(tmp_path / 'g16.png').getpixel((0, 0)) == (128, 128, 128)


def test_palette_image_keeps_its_colours(tmp_path):
    from PIL import Image
    img = Image.new('P', (4, 4), 1)
    img.putpalette([0, 0, 0, 10, 200, 30] + [0] * 762)
    img.save(tmp_path / 'p.png', transparency=0)
    rgb = open_rgb(tmp_path / 'p.png')
    assert rgb.mode == 'RGB' and rgb.getpixel((0, 0)) == (10, 200, 30)


@pytest.mark.parametrize('write', [lambda p: p.write_bytes(b'\x89PNG\r\n\x1a\n broken'),
                                   lambda p: __import__('PIL.Image').Image.new('F', (2, 2)).save(p.with_suffix('.tif'))])
def test_unreadable_or_rangeless_images_are_refused_naming_the_file(tmp_path, write):
    path = tmp_path / 'x.png'
    write(path)
    path = path if path.exists() else path.with_suffix('.tif')
    with pytest.raises(ValueError, match=f'cannot read image .*{path.name}'):
        open_rgb(path)
