// Bundled for Chromium by Bun in test/e2e/ui-stream-browser.test.ts: the ai package's own Chat, as a React app's useChat drives it.
import { AbstractChat, DefaultChatTransport, type ChatState, type ChatStatus, type UIMessage } from 'ai';

class PlainState implements ChatState<UIMessage> {
  status: ChatStatus = 'ready';
  error: Error | undefined = undefined;
  messages: UIMessage[] = [];
  pushMessage = (message: UIMessage): void => void (this.messages = [...this.messages, message]);
  popMessage = (): void => void (this.messages = this.messages.slice(0, -1));
  replaceMessage = (index: number, message: UIMessage): void => void (this.messages = this.messages.map((m, i) => (i === index ? message : m)));
  snapshot = <T>(thing: T): T => structuredClone(thing);
}

/** Sends `text` to the agent's chat at `api` and answers the chat's status, error and messages once the turn ended. */
async function chatOnce(api: string, text: string): Promise<{ status: string; error: string | undefined; messages: UIMessage[] }> {
  const chat = new (class extends AbstractChat<UIMessage> {})({ transport: new DefaultChatTransport({ api }), state: new PlainState() });
  await chat.sendMessage({ text });
  return { status: chat.status, error: chat.error?.message, messages: chat.messages };
}

(globalThis as { chatOnce?: typeof chatOnce }).chatOnce = chatOnce;
