"""Test setups of the built-in store kinds, one module per kind named after
it (``tests.support.stores`` finds them through the registry); a kind that
lives elsewhere names its own module in its ``StoreKind.testing``."""
