/** The ops a running server answers are exactly the ops of the schema tables, payload and answer alike. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { opAnswerSchemas, opSchemas } from '../../src/protocol/ops.js';
import { startNetwork } from '../helpers/network.js';

describe('op registry', () => {
  it('the composition root registers one handler for every op of opSchemas, and no other', async () => {
    await using net = await startNetwork({ servers: [{ serverLogin: 'alpha' }] });
    const registered = net.servers[0]!.ctx.registry.names().sort();
    assert.deepEqual(registered, Object.keys(opSchemas).sort());
    assert.deepEqual(Object.keys(opAnswerSchemas).sort(), Object.keys(opSchemas).sort());
  });
});
