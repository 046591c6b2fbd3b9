"""placeholder"""

ROUTES: dict = {}
