// Package directive reads directives: parsing the Markdown-with-XML file
// format (see Parse), resolving a directive name over the project, user
// and system spaces (Resolver), validating and interpolating inputs
// (ValidateInputs, RenderBody, Interpolate), and snapshotting the items a
// thread may load into a content-addressed bundle in the blob store
// (BuildBundle, LoadBundle) so that stateless workers never read the
// enqueuer's disk.
//
// A directive file:
//
//	<!-- rye:signed:TIMESTAMP:SHA256:SIG:KEYID -->   optional signature line
//	# Markdown body ...
//	```xml
//	<directive name="x" version="1.0.0">
//	  <metadata> description, category, author, model, limits,
//	             permissions, hooks, continuation </metadata>
//	  <permissions>...</permissions>        (also accepted here)
//	  <inputs>, <process>, <outputs>
//	</directive>
//	```
//
// Permissions fail closed: a directive without <permissions> (or legacy
// <cap>) has PermissionsDeclared false and no capabilities. Both spellings
// produce thread capability strings (see thread.Match); <fetch>, the
// reference's later primary, is written as the search and load it grants
// (thread.ExpandFetch).
//
// An element or attribute that spool does not read and the reference's
// own directives do not write is an error naming its line and the nearest
// known name (schema.go): a misspelt <limits> or <permissions> would
// otherwise change the run without a word. Lint warns of a capability
// that names no tool or directive the project has.
//
// Spaces: the system space is embedded in the binary (system/directives)
// and holds DefaultContinuation, the directive that renders a continuation
// thread's seed message. The continuation thread itself runs with the
// original directive's limits and permissions; the continuation directive
// only supplies the text.
package directive
