import './base.css';
import './leftovers.css';
import './elsewhere.css';
