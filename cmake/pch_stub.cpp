// Gives the precompiled-header target something to compile.
