"""The Dagster code location. Assets, checks, schedules and sensors join as the issues land."""

from __future__ import annotations

import dagster as dg

import assets

defs = dg.Definitions(assets=dg.load_assets_from_package_module(assets))
