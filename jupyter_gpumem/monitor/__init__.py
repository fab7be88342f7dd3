"""The live monitor's insides: the widget, its header, its series and the plot it draws in the browser."""
