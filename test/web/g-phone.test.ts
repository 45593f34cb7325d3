/** Web client test (g): test (a) on a phone-sized screen (360×740, touch). */
import { it } from 'node:test';
import { browserSuite } from '../helpers/browser.js';
import { conversationAcrossServers } from './conversation-flow.js';

browserSuite('web client (g)', (browser) => {
  it('the conversation of (a) on a phone-sized screen', () =>
    conversationAcrossServers(browser(), 'g-phone', {
      viewport: { width: 360, height: 740 },
      isMobile: true,
      hasTouch: true,
    }));
});
