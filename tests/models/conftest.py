import pytest

import dynashape as ds


@pytest.fixture(autouse=True)
def _fresh_cache():
    ds.reset()
    with ds.config.patch(pgo=False):
        yield
