/** Web client test (a): a conversation across two servers in two desktop-sized browser contexts. */
import { it } from 'node:test';
import { browserSuite } from '../helpers/browser.js';
import { conversationAcrossServers } from './conversation-flow.js';

browserSuite('web client (a)', (browser) => {
  it('alice on alpha and bob on beta chat; ticks go accepted → delivered → read', () =>
    conversationAcrossServers(browser(), 'a-desktop', { viewport: { width: 1100, height: 760 } }));
});
