"""A small Django project for the tests of denpyo.contrib.django: an order shop
whose checkout writes an order and enqueues its invoice email in one transaction."""
