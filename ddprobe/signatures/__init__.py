"""Failure signatures: a catalogue of real failure strings (catalogue.yaml) and its matcher."""
from __future__ import annotations

from ddprobe.signatures.catalogue import Catalogue, Entry, load_catalogue
from ddprobe.signatures.matcher import (
                                        LogMatch,
                                        best_match,
                                        classify_phase,
                                        find_matches,
                                        match_all,
                                        match_log,
                                        package_path,
                                        serving_start,
)
from ddprobe.signatures.normalise import normalise, strip_prefix

__all__ = ["Catalogue", "Entry", "LogMatch", "best_match", "classify_phase", "find_matches",
           "load_catalogue", "match_all", "match_log", "normalise", "package_path",
           "serving_start", "strip_prefix"]
