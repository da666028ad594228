import pytest
from plan_contexts import make_context


@pytest.fixture
def context_factory():
    """``make_context`` (tests/plan_contexts.py): a planning context from plain lists."""
    return make_context
