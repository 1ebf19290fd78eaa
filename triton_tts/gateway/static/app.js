// The gateway's page: speak over the /v1/audio/speech/ws WebSocket, play each 16-bit PCM
// chunk with Web Audio as it arrives, show each word as it is spoken (the words messages'
// times, for voices that have them), measure time to first audio and real-time factor,
// and save what was received as a WAV file. The text may be SSML (<speak>...). Plain JS, no build step, nothing fetched
// from outside the gateway.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const el = {
    form: $("form"), text: $("text"), voice: $("voice"), voiceInfo: $("voice-info"),
    speed: $("speed"), speedRange: $("speed-range"), apiKey: $("api-key"),
    speak: $("speak"), stop: $("stop"), download: $("download"), status: $("status"),
    connection: $("connection"), ttfa: $("ttfa"), rtf: $("rtf"), chunks: $("chunks"),
    audioSeconds: $("audio-seconds"), words: $("words"),
  };
  // Where the first chunk (or one after an underrun) starts: a little ahead of "now", so
  // that its start is not already in the past when the audio thread sees it.
  const LEAD_S = 0.05;
  // How long Stop waits for the server's "cancelled" before dropping the connection.
  const CANCEL_GRACE_MS = 5000;

  let audio = null; // the AudioContext, made on the first Speak (a user gesture)
  let nextStartTime = 0; // where the next chunk starts on audio's clock: chunks play back to back
  const playing = new Set(); // scheduled AudioBufferSourceNodes not yet ended
  let socket = null;
  let socketKey = null; // the API key the open socket was made with
  let request = null; // the request in flight or last finished (see newRequest)
  let wavUrl = null;
  const voices = new Map();
  let aliases = {}; // OpenAI voice names -> our voice ids

  // The counters, for a test or the console. audioContextTime reads the audio clock live.
  const stats = {
    state: "idle", chunks: 0, samples: 0, sampleRate: 0, ttfaMs: null, rtf: null,
    serverRtf: null, server: null, audioSeconds: 0, scheduledSeconds: 0, playedChunks: 0,
    error: null, words: 0, wordsShown: 0,
  };
  Object.defineProperty(stats, "audioContextTime", {
    enumerable: true, get: () => (audio ? audio.currentTime : 0),
  });
  window.ttsStats = stats;

  function newRequest() {
    // One Speak. Times are performance.now() milliseconds; raw holds the PCM frames as received.
    return {
      id: null, sampleRate: 0, voice: "", pressedAt: performance.now(), sentAt: null,
      firstAt: null, lastAt: null, raw: [], finished: false, cancelRequested: false,
      // Where each chunk plays: [seconds into the request's audio, time on audio's clock],
      // so that a word's time (seconds into the audio) finds its place on the clock.
      placed: [], words: [],
    };
  }

  // ---- display -----------------------------------------------------------------------

  function setState(state, message) {
    stats.state = state;
    el.status.dataset.state = state;
    el.status.textContent = message;
    updateButtons();
  }

  function updateButtons() {
    const busy = request !== null && !request.finished;
    el.stop.disabled = !busy && playing.size === 0;
  }

  function render() {
    el.chunks.textContent = String(stats.chunks);
    el.ttfa.textContent = stats.ttfaMs === null ? "–" : `${Math.round(stats.ttfaMs)} ms`;
    if (stats.rtf === null) {
      el.rtf.textContent = "–";
    } else {
      const server = stats.serverRtf === null ? "" : ` (server ${stats.serverRtf.toFixed(3)})`;
      el.rtf.textContent = `${stats.rtf.toFixed(3)}${server}`;
    }
    el.audioSeconds.textContent = stats.sampleRate ? `${stats.audioSeconds.toFixed(2)} s` : "–";
  }

  function fail(r, message) {
    // The request's error, shown as the server worded it.
    if (r !== request || r.finished) return;
    r.finished = true;
    stats.error = message;
    setState("error", `Error: ${message}`);
  }

  // ---- voices ------------------------------------------------------------------------

  function authHeaders() {
    const key = el.apiKey.value.trim();
    return key ? { Authorization: `Bearer ${key}` } : {};
  }

  function errorMessage(body, fallback) {
    // OpenAI-style {"error": {"message": ...}} bodies and WebSocket error messages alike.
    const message = body && body.error && body.error.message;
    return message ? String(message) : fallback;
  }

  async function loadVoices() {
    let body = null;
    try {
      const response = await fetch("v1/audio/voices", { headers: authHeaders() });
      body = await response.json().catch(() => null);
      if (!response.ok) throw new Error(errorMessage(body, `HTTP ${response.status}`));
    } catch (err) {
      el.voiceInfo.textContent = `Could not list the voices: ${err.message}`;
      return;
    }
    const chosen = el.voice.value;
    voices.clear();
    el.voice.replaceChildren();
    for (const voice of body.voices || []) {
      voices.set(voice.id, voice);
      const speakers = voice.speakers || [];
      if (!speakers.length) {
        el.voice.append(new Option(voice.id, voice.id));
        continue;
      }
      // A speaker is asked for as "voice:speaker"; the bare id is the voice's default speaker.
      const group = document.createElement("optgroup");
      group.label = voice.id;
      group.append(new Option(`${voice.id} (default speaker)`, voice.id));
      for (const speaker of speakers) {
        const id = `${voice.id}:${speaker}`;
        voices.set(id, voice);
        group.append(new Option(speaker, id));
      }
      el.voice.append(group);
    }
    el.voice.value = voices.has(chosen) ? chosen : body.default || "";
    aliases = body.aliases || {};
    if (body.speed) {  // the server's own bounds, not a copy of them
      for (const input of [el.speed, el.speedRange]) {
        input.min = String(body.speed.min);
        input.max = String(body.speed.max);
      }
    }
    describeVoice();
  }

  function describeVoice() {
    const voice = voices.get(el.voice.value);
    if (!voice) {
      el.voiceInfo.textContent = "";
      return;
    }
    const parts = [voice.language, `${voice.sample_rate} Hz`];
    if (voice.speakers && voice.speakers.length) parts.push(`${voice.speakers.length} speakers`);
    const names = Object.keys(aliases).filter((alias) => aliases[alias] === el.voice.value);
    if (names.length) parts.push(`also called ${names.join(", ")}`);
    el.voiceInfo.textContent = parts.filter(Boolean).join(" · ");
  }

  // ---- connection --------------------------------------------------------------------

  function closeReason(event) {
    if (event.reason) return event.reason;
    if (event.code === 1008) return "the gateway refused the connection (is the API key right?)";
    if (event.code === 1006) return "could not reach the gateway, or it refused the connection (API key?)";
    return `the connection closed (code ${event.code})`;
  }

  function dropSocket() {
    // Closing the socket cancels whatever the server was doing for it.
    const old = socket;
    socket = null;
    el.connection.textContent = "not connected";
    if (old && old.readyState <= WebSocket.OPEN) old.close();
  }

  function connect() {
    const key = el.apiKey.value.trim();
    if (socket && socket.readyState === WebSocket.OPEN && socketKey === key) return Promise.resolve(socket);
    dropSocket();
    const url = new URL("v1/audio/speech/ws", window.location.href);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    if (key) url.searchParams.set("api_key", key);
    const ws = new WebSocket(url);
    ws.binaryType = "arraybuffer";
    socket = ws;
    socketKey = key;
    return new Promise((resolve, reject) => {
      ws.onopen = () => {
        el.connection.textContent = "connected";
        resolve(ws);
      };
      ws.onmessage = (event) => {
        if (ws === socket) onMessage(event.data);
      };
      ws.onclose = (event) => {
        const reason = closeReason(event);
        if (ws === socket) {
          socket = null;
          el.connection.textContent = "not connected";
          if (request) fail(request, reason);
        }
        reject(new Error(reason)); // ignored once open
      };
    });
  }

  // ---- messages ----------------------------------------------------------------------

  function onMessage(data) {
    if (data instanceof ArrayBuffer) {
      onChunk(data);
      return;
    }
    let message;
    try {
      message = JSON.parse(data);
    } catch {
      return;
    }
    const r = request;
    // One request at a time per socket; anything naming another id is stale.
    const mine = r && !r.finished && (message.id == null || r.id === null || message.id === r.id);
    switch (message.type) {
      case "ping":
        el.connection.textContent = "connected";
        break;
      case "start":
        if (mine) onStart(r, message);
        break;
      case "end":
        if (mine) onEnd(r, message);
        break;
      case "cancelled":
        if (mine) onCancelled(r);
        break;
      case "words":
        if (mine) onWords(r, message);
        break;
      case "error": {
        const text = errorMessage(message, "unknown error");
        if (r && !r.finished) {
          if (mine) fail(r, text);
        } else {
          stats.error = text; // not about a request (a malformed message, say)
          setState("error", `Error: ${text}`);
        }
        break;
      }
      default:
        break;
    }
  }

  function onStart(r, message) {
    if (message.channels !== 1 || message.format !== "s16le") {
      fail(r, `unsupported audio: ${message.channels} channels, ${message.format}`);
      dropSocket();
      return;
    }
    r.id = message.id;
    r.sampleRate = message.sample_rate;
    r.voice = message.voice || "";
    stats.sampleRate = message.sample_rate;
    if (!r.cancelRequested) setState("streaming", `Speaking as ${r.voice} at ${r.sampleRate} Hz…`);
    render();
  }

  function onChunk(buffer) {
    const r = request;
    if (!r || r.finished || r.cancelRequested || !r.sampleRate) return;
    const now = performance.now();
    if (r.firstAt === null) {
      r.firstAt = now;
      stats.ttfaMs = now - r.pressedAt;
    }
    r.lastAt = now;
    const count = buffer.byteLength >> 1;
    r.raw.push(buffer.slice(0, count * 2));
    stats.chunks += 1;
    stats.samples += count;
    stats.audioSeconds = stats.samples / r.sampleRate;
    const startAt = play(buffer, count, r.sampleRate);
    if (startAt !== null) r.placed.push([(stats.samples - count) / r.sampleRate, startAt]);
    render();
  }

  function onWords(r, message) {
    // The words the next chunk completes; shown now, lit as the audio reaches them.
    for (const word of message.words) {
      const span = document.createElement("span");
      span.textContent = word.word;
      el.words.append(span, " ");
      r.words.push({ start: word.start, end: word.end, span, shown: false });
      stats.words += 1;
    }
  }

  function clockOf(r, seconds) {
    // A time into the request's audio -> audio's clock (chunks may start late: underruns).
    let at = null;
    for (const [offset, clock] of r.placed) {
      if (offset > seconds) break;
      at = clock + (seconds - offset);
    }
    return at;
  }

  function lightWords() {
    const r = request;
    if (r && audio && r.words.length) {
      const now = audio.currentTime;
      for (const word of r.words) {
        const start = clockOf(r, word.start);
        const end = clockOf(r, word.end);
        const current = start !== null && start <= now && now < end;
        const said = end !== null && now >= end;
        word.span.classList.toggle("current", current);
        word.span.classList.toggle("said", said);
        if ((current || said) && !word.shown) {
          word.shown = true;
          stats.wordsShown += 1;
        }
      }
    }
    requestAnimationFrame(lightWords);
  }
  requestAnimationFrame(lightWords);

  function onEnd(r, message) {
    r.finished = true;
    if (r.cancelRequested) {
      setState("cancelled", `Stopped after ${stats.chunks} chunks.`);
      return;
    }
    stats.server = {
      chunks: message.chunks, samples: message.samples,
      audioSeconds: message.audio_seconds, synthesisSeconds: message.synthesis_seconds,
    };
    if (stats.audioSeconds > 0) stats.rtf = (r.lastAt - r.sentAt) / 1000 / stats.audioSeconds;
    if (message.audio_seconds > 0) stats.serverRtf = message.synthesis_seconds / message.audio_seconds;
    setWav(r);
    setState("done", `Done: ${stats.chunks} chunks, ${stats.audioSeconds.toFixed(2)} s of audio.`);
    render();
  }

  function onCancelled(r) {
    r.finished = true;
    setState("cancelled", `Stopped after ${stats.chunks} chunks.`);
  }

  // ---- audio -------------------------------------------------------------------------

  function ensureAudio() {
    // Made and resumed inside the click, where browsers allow sound to start. AudioBuffers
    // carry the stream's own rate; Web Audio resamples them to the device's.
    if (!audio) audio = new AudioContext();
    if (audio.state === "suspended") audio.resume();
  }

  function play(buffer, count, sampleRate) {
    if (count === 0) {
      stats.playedChunks += 1; // nothing to play; counted so played == received at the end
      return null;
    }
    const pcm = new DataView(buffer);
    const samples = new Float32Array(count);
    for (let i = 0; i < count; i += 1) samples[i] = pcm.getInt16(2 * i, true) / 32768;
    const chunk = audio.createBuffer(1, count, sampleRate);
    chunk.copyToChannel(samples, 0);
    const source = audio.createBufferSource();
    source.buffer = chunk;
    source.connect(audio.destination);
    const startAt = Math.max(nextStartTime, audio.currentTime + LEAD_S);
    source.start(startAt);
    nextStartTime = startAt + chunk.duration;
    stats.scheduledSeconds += chunk.duration;
    playing.add(source);
    source.onended = () => {
      playing.delete(source);
      stats.playedChunks += 1;
      updateButtons();
    };
    updateButtons();
    return startAt;
  }

  function stopPlayback() {
    for (const source of playing) {
      source.onended = null;
      source.stop();
    }
    playing.clear();
    nextStartTime = 0;
    updateButtons();
  }

  // ---- WAV ---------------------------------------------------------------------------

  function wavBlob(frames, sampleRate) {
    // A canonical 44-byte RIFF/WAVE header (PCM, mono, 16-bit) before the frames as received
    // (already little-endian, as WAV wants).
    const dataBytes = frames.reduce((total, frame) => total + frame.byteLength, 0);
    const header = new DataView(new ArrayBuffer(44));
    const text = (offset, value) => {
      for (let i = 0; i < value.length; i += 1) header.setUint8(offset + i, value.charCodeAt(i));
    };
    text(0, "RIFF");
    header.setUint32(4, 36 + dataBytes, true);
    text(8, "WAVE");
    text(12, "fmt ");
    header.setUint32(16, 16, true); // fmt chunk size
    header.setUint16(20, 1, true); // PCM
    header.setUint16(22, 1, true); // channels
    header.setUint32(24, sampleRate, true);
    header.setUint32(28, sampleRate * 2, true); // bytes per second
    header.setUint16(32, 2, true); // bytes per frame
    header.setUint16(34, 16, true); // bits per sample
    text(36, "data");
    header.setUint32(40, dataBytes, true);
    return new Blob([header, ...frames], { type: "audio/wav" });
  }

  function setWav(r) {
    if (wavUrl) URL.revokeObjectURL(wavUrl);
    wavUrl = URL.createObjectURL(wavBlob(r.raw, r.sampleRate));
    el.download.dataset.filename = `speech-${r.voice || "tts"}.wav`;
    el.download.disabled = false;
  }

  function clearWav() {
    if (wavUrl) URL.revokeObjectURL(wavUrl);
    wavUrl = null;
    el.download.disabled = true;
  }

  // ---- actions -----------------------------------------------------------------------

  async function speak() {
    ensureAudio();
    stopPlayback();
    // A request still running is dropped with its connection: the server cancels it, and
    // none of its late frames can be taken for the new one's.
    if (request && !request.finished) {
      request.finished = true;
      dropSocket();
    }
    const r = (request = newRequest());
    Object.assign(stats, {
      chunks: 0, samples: 0, sampleRate: 0, ttfaMs: null, rtf: null, serverRtf: null,
      server: null, audioSeconds: 0, scheduledSeconds: 0, playedChunks: 0, error: null,
      words: 0, wordsShown: 0,
    });
    el.words.replaceChildren();
    clearWav();
    render();
    setState("connecting", "Connecting…");
    let ws;
    try {
      ws = await connect();
    } catch (err) {
      fail(r, err.message);
      return;
    }
    if (r !== request || r.finished) return;
    const message = { type: "speak", input: el.text.value };
    if (el.voice.value) message.voice = el.voice.value;
    if (el.speed.value !== "") message.speed = Number(el.speed.value);
    const chosen = voices.get(el.voice.value);
    if (chosen && chosen.timestamps) message.timestamps = true; // words to show
    r.sentAt = performance.now();
    ws.send(JSON.stringify(message));
    setState("connecting", "Waiting for the first audio…");
  }

  function stop() {
    stopPlayback();
    const r = request;
    if (!r || r.finished) return;
    r.cancelRequested = true;
    if (r.sentAt === null || !socket || socket.readyState !== WebSocket.OPEN) {
      r.finished = true;
      dropSocket();
      setState("cancelled", "Stopped.");
      return;
    }
    socket.send(JSON.stringify({ type: "cancel" }));
    el.status.textContent = "Stopping…";
    setTimeout(() => {
      if (r === request && !r.finished) {
        r.finished = true;
        dropSocket();
        setState("cancelled", "Stopped (the server did not confirm; the connection was closed).");
      }
    }, CANCEL_GRACE_MS);
  }

  function download() {
    if (!wavUrl) return;
    const link = document.createElement("a");
    link.href = wavUrl;
    link.download = el.download.dataset.filename || "speech.wav";
    document.body.append(link);
    link.click();
    link.remove();
  }

  el.form.addEventListener("submit", (event) => {
    event.preventDefault();
    speak();
  });
  el.stop.addEventListener("click", stop);
  el.download.addEventListener("click", download);
  el.voice.addEventListener("change", describeVoice);
  el.apiKey.addEventListener("change", loadVoices);
  el.speedRange.addEventListener("input", () => {
    el.speed.value = el.speedRange.value;
  });
  el.speed.addEventListener("input", () => {
    el.speedRange.value = el.speed.value;
  });
  render();
  loadVoices();
})();
