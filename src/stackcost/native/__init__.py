"""Native (C++) rungs: sources shipped as package data, a build cache, and the SCW1 format."""
