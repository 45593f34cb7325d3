/**
 * Web client test (i): verified ticks (docs/web-client.md). alice on alpha writes to bob on beta: the
 * delivered tick says whether beta's signed receipt checked out, and why (hover title, tap note); bob's
 * read receipt, signed by bob, makes the read tick verified; after a reload the read time comes from
 * history only, which the tick says as well.
 */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import type { Browser, Page } from 'playwright-core';
import {
  aliceAndBob,
  browserSuite,
  messageWith,
  openConversation,
  send,
  startChat,
  waitForTick,
} from '../helpers/browser.js';

/** The tick button of alice's message with text, by its accessible name. */
const tickOf = (page: Page, text: string, name: string) =>
  messageWith(page, text).getByRole('button', { name, exact: true });

/** Taps the tick and returns the note it opens (and checks the hover title says the same). */
async function explanation(page: Page, text: string, name: string): Promise<string> {
  const tick = tickOf(page, text, name);
  await tick.click();
  const note = messageWith(page, text).getByRole('note');
  const said = await note.innerText();
  assert.equal(await tick.getAttribute('title'), said);
  assert.equal(await tick.getAttribute('aria-expanded'), 'true');
  await tick.click();
  await note.waitFor({ state: 'detached' });
  return said;
}

/** What alice's delivered tick should say: its name, the exact tap note, and the delivery sentence later. */
interface DeliveryExpectation {
  name: 'Delivered, verified' | 'Delivered, not verified';
  note: RegExp;
  /** The delivery sentence after a reload (no hash to compare on a new connection). */
  afterReload: string;
}

/** alice writes, bob reads: the delivered tick as expected, then a signed read, then a reported one. */
function verifiedTickFlow(name: string, delivery: DeliveryExpectation) {
  return (browser: () => Browser) =>
    aliceAndBob(browser(), name, {}, async ({ alice, bob, shot }) => {
      await startChat(alice, 'bob');
      await send(alice, 'Proof please');
      await waitForTick(alice, 'Proof please', 'delivered');
      const verified = delivery.name === 'Delivered, verified';
      const delivered = tickOf(alice, 'Proof please', delivery.name);
      await delivered.waitFor();
      await messageWith(alice, 'Proof please')
        .and(alice.locator(`li[data-verified="${verified}"]`))
        .waitFor();
      assert.equal(/\bunverified\b/.test((await delivered.getAttribute('class')) ?? ''), !verified);
      const deliveredNote = await explanation(alice, 'Proof please', delivery.name);
      assert.match(deliveredNote, delivery.note);
      await delivered.click();
      await shot(alice, 'alice-delivered');
      await delivered.click();

      // bob reads it: his receipt arrives live, signed by him, and the read tick is filled.
      await openConversation(bob, 'alice');
      await messageWith(bob, 'Proof please').waitFor();
      await waitForTick(alice, 'Proof please', 'read');
      const read = tickOf(alice, 'Proof please', 'Read, verified');
      await read.waitFor();
      assert.doesNotMatch((await read.getAttribute('class')) ?? '', /\bunverified\b/);
      const readNote = await explanation(alice, 'Proof please', 'Read, verified');
      assert.match(readNote, /^Read by bob at [^,]+, signed by bob\. /);
      assert.ok(readNote.endsWith(`. ${deliveredNote}`), readNote);
      await read.click();
      await shot(alice, 'alice-read-verified');

      // After a reload the read time comes from history, without bob's signed receipt.
      await alice.reload();
      await openConversation(alice, 'bob');
      await waitForTick(alice, 'Proof please', 'read');
      const reported = await explanation(alice, 'Proof please', 'Read, not verified');
      assert.match(
        reported,
        /^Read by bob at [^,]+, not signed: the server reports it; bob's signed receipt has not reached this device\. /,
      );
      assert.match(reported, new RegExp(`${delivery.afterReload}$`));
      // The contract's accessible text of the tick is still there, exactly.
      assert.equal(await messageWith(alice, 'Proof please').getByText('Read', { exact: true }).count(), 1);
    });
}

browserSuite('web client (i)', (browser) => {
  it('a delivered tick backed by beta’s receipt is filled', () =>
    verifiedTickFlow('i-verified-proof', {
      name: 'Delivered, verified',
      note: /^Signed by bob's server beta at .+: it stored this exact message$/,
      afterReload: ': it stored this message',
    })(browser));
});
