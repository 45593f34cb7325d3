#!/usr/bin/env -S node --max-semi-space-size=32
// A 32 MiB young generation for V8: at 200 pairs/s a server collects it about half as often as with the
// default, so fewer requests wait behind a pause (docs/operations.md, "Running").
import '../dist/cli/main.js';
