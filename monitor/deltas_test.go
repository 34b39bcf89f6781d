package monitor_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
)

// TestDeltasStream: the transcript page of a thread not finished has the
// "being written" panel, fed by /api/threads/ID/deltas: a stream of what
// its worker publishes as the model writes (here published by hand while
// the root waits on its children), each piece once; a finished thread's
// stream answers 204, which stops an EventSource.
func TestDeltasStream(t *testing.T) {
	e := setup(t, envOptions{})
	root := e.startTree()
	e.waitTreeHeld(root.ThreadID)
	leaf := root.ThreadID // waiting on its children: no model of its own writes meanwhile

	page := e.page("/threads/" + leaf + "/transcript")
	require.Contains(t, page, `id="writing"`)
	require.Contains(t, page, `data-api="/api/threads/`+leaf+`/deltas"`)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/api/threads/"+leaf+"/deltas", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))

	reg, err := registry.New(registry.Config{Client: e.rdb, Keys: e.keys})
	require.NoError(t, err)
	pieces := []spooltype.Delta{{Turn: 3, Offset: 0, Text: "Hello, "}, {Turn: 3, Offset: 0, Text: "Hello, wor"}, {Turn: 3, Offset: 10, Text: "ld"},
		{Turn: 3, CallID: "c1", Tool: "rye/file-system/fs_write", Offset: 0, Text: `{"path":`}}
	go func() {
		// Published until the stream has subscribed (a piece before is
		// lost, as pub/sub is): the cursor keeps each byte once.
		for ctx.Err() == nil {
			var raws [][]byte
			for _, d := range pieces {
				b, _ := json.Marshal(d)
				raws = append(raws, b)
			}
			_ = reg.PublishDeltas(ctx, leaf, raws)
			time.Sleep(100 * time.Millisecond)
		}
	}()
	text, args := "", ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && (text != "Hello, world" || args != `{"path":`) {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var d spooltype.Delta
		require.NoError(t, json.Unmarshal([]byte(line), &d))
		if d.CallID != "" {
			require.Equal(t, len(args), d.Offset)
			args += d.Text
			continue
		}
		require.Equal(t, len(text), d.Offset, "each piece once, in order")
		text += d.Text
	}
	require.Equal(t, "Hello, world", text)
	require.Equal(t, `{"path":`, args)
	cancel()

	e.release()
	e.wait(root.ThreadID)
	e.requireStatus(http.StatusNoContent, "/api/threads/"+leaf+"/deltas")
	require.NotContains(t, e.page("/threads/"+leaf+"/transcript"), `id="writing"`)
}

// TestBrowserTurnBeingWritten: headless Chromium on the transcript page
// of a thread whose model writes slowly shows the turn being written,
// piece by piece, in the "being written" panel, which gives way to the
// turn's events once it is durable.
func TestBrowserTurnBeingWritten(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	e := setup(t, envOptions{streamDelay: time.Second})
	rec := e.start("t/writer", map[string]any{"gate": e.gate})
	br := startBrowser(t, bin)
	page := br.newTab()
	page.navigate(e.srv.URL + "/threads/" + rec.ThreadID + "/transcript")
	// The page follows the thread before it writes: the writing turn
	// comes once the gate opens.
	page.waitTrue(30*time.Second, "the page following", `document.getElementById("writing") !== null`)
	time.Sleep(time.Second)
	e.release()
	page.waitTrue(60*time.Second, "the turn being written", `!document.getElementById("writing").hidden &&
		document.querySelector("#writing .text").textContent.startsWith("A thread's words") &&
		document.querySelector("#writing .text").textContent.length < 150`)
	shot := page.screenshot()
	checkPNG(t, shot, 1280, 900)
	saveArtifact(t, "monitor-turn-being-written.png", shot)
	page.waitTrue(60*time.Second, "the turn durable", `document.getElementById("writing").hidden &&
		document.getElementById("events").dataset.done === "true" &&
		document.getElementById("events").innerText.includes("before its checkpoint makes it durable")`)
}
